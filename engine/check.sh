#!/usr/bin/env bash
# Fails when the committed engine library is missing or was not built from
# the current engine/rust sources (see build.sh). Run by CI.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib="$here/lib/linux_amd64"
want="$("$here/source_hash.sh")"
if [ ! -s "$lib/libopenetl_engine.a" ] || [ ! -f "$lib/SOURCE_HASH" ] || [ "$(cat "$lib/SOURCE_HASH")" != "$want" ] ||
	! grep -qF "\"$want\"" "$here/libhash.go" 2>/dev/null; then
	echo "engine library is stale: run make engine" >&2
	exit 1
fi
echo "engine library is up to date ($want)"
