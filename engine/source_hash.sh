#!/usr/bin/env bash
# Prints the engine's source hash: sha256 over "sha256  path" lines of
# engine/rust/Cargo.toml, Cargo.lock, every file under engine/rust/src and
# the C header engine/include/openetl_engine.h (the Go side's view of the
# library's ABI), sorted by path (paths relative to engine/rust). build.sh
# writes it to lib/linux_amd64/SOURCE_HASH; check.sh compares.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/rust"
{
	printf '%s\n' Cargo.toml Cargo.lock ../include/openetl_engine.h
	find src -type f
} | LC_ALL=C sort | while IFS= read -r f; do
	sha256sum -- "$f"
done | sha256sum | cut -d' ' -f1
