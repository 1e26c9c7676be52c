#!/usr/bin/env bash
# Fails when the committed engine library is missing or was not built from
# the current engine/rust sources (see build.sh). Run by CI.
#
# Two checks. The fast one compares the stamp (lib/linux_amd64/SOURCE_HASH,
# and libhash.go) with the hash of the sources (source_hash.sh): it needs
# no Rust and catches a library not rebuilt after a change. The stamp only
# says what the library claims, so when cargo is on PATH the library is
# also rebuilt from the sources (build.sh --to, a reproducible build) and
# compared byte for byte: a library built from other sources, or by hand,
# fails. The rebuild needs the toolchain the library was built with
# (lib/linux_amd64/TOOLCHAIN): under another rustc the bytes legitimately
# differ, so the comparison is skipped with a note. OPENETL_ENGINE_CHECK_BYTES=0
# skips it too.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib="$here/lib/linux_amd64"
want="$("$here/source_hash.sh")"
if [ ! -s "$lib/libopenetl_engine.a" ] || [ ! -f "$lib/SOURCE_HASH" ] || [ "$(cat "$lib/SOURCE_HASH")" != "$want" ] ||
	! grep -qF "\"$want\"" "$here/libhash.go" 2>/dev/null; then
	echo "engine library is stale: run make engine" >&2
	exit 1
fi
if [ "${OPENETL_ENGINE_CHECK_BYTES:-1}" = 0 ] || ! command -v cargo >/dev/null; then
	echo "engine library is up to date ($want; bytes not compared: no cargo)"
	exit 0
fi
if [ ! -f "$lib/TOOLCHAIN" ] || [ "$(rustc -V)" != "$(cat "$lib/TOOLCHAIN")" ]; then
	echo "engine library is up to date ($want; bytes not compared: built with $(cat "$lib/TOOLCHAIN" 2>/dev/null || echo "an unrecorded toolchain"), this is $(rustc -V))"
	exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The committed library's build: no test features, whatever the caller's
# environment says.
ENGINE_FEATURES="" "$here/build.sh" --to "$tmp" >"$tmp/build.log" 2>&1 || {
	cat "$tmp/build.log" >&2
	echo "engine/check.sh: rebuilding the engine library failed" >&2
	exit 1
}
if ! diff=$(cmp "$lib/libopenetl_engine.a" "$tmp/libopenetl_engine.a" 2>&1); then
	echo "engine library differs from a rebuild of its sources ($diff): run make engine and commit engine/lib" >&2
	exit 1
fi
echo "engine library is up to date ($want; $(stat -c %s "$lib/libopenetl_engine.a") bytes equal to a rebuild)"
