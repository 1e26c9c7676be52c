#!/usr/bin/env bash
# Runs cargo with the given arguments on the engine crate, mirrored into
# the build cache under the build lock (see stage.sh): `make test-rust`
# uses it so that a fresh clone's tests reuse the cached build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/stage.sh"
engine_stage_locked "$here"
cd "$engine_stage/rust"
cargo "$@"
