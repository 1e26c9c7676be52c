#!/usr/bin/env bash
# Runs cargo with the given arguments on the engine crate, mirrored into
# the build cache (see stage.sh) under the build lock: `make test-rust`
# uses it so that a fresh clone's tests reuse the cached build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/openetl/cargo-target}"
mkdir -p "$CARGO_TARGET_DIR"
exec 9>"$CARGO_TARGET_DIR/openetl-engine-build.lock"
flock 9
. "$here/stage.sh"
engine_stage_sync "$here"
cd "$engine_stage/rust"
cargo "$@"
