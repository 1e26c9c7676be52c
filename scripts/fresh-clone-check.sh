#!/usr/bin/env bash
# Checks the README's first command on a fresh clone of the committed tree:
# `go run ./examples/quickstart` must work without a Rust toolchain (the
# prebuilt engine library is committed), and a second run must add nothing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git clone --quiet "$repo" "$tmp/clone"
# A PATH without cargo or rustc on it.
nocargo=""
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
	if [ -x "$d/cargo" ] || [ -x "$d/rustc" ]; then continue; fi
	nocargo="${nocargo:+$nocargo:}$d"
done
cd "$tmp/clone"
if PATH="$nocargo" command -v cargo >/dev/null; then
	echo "fresh-clone-check: could not hide cargo from PATH" >&2
	exit 1
fi
out="$(PATH="$nocargo" go run ./examples/quickstart -rows 20000 2>&1)" || { echo "$out"; exit 1; }
grep -q "committed .* epoch" <<<"$out" || { echo "first run: no commit summary:"; echo "$out"; exit 1; }
out2="$(PATH="$nocargo" go run ./examples/quickstart -rows 20000 2>&1)" || { echo "$out2"; exit 1; }
grep -q "nothing new" <<<"$out2" || { echo "second run added data:"; echo "$out2"; exit 1; }
[ -d quickstart-data/tables/orders/data ] || { echo "no ./quickstart-data/tables/orders/data"; exit 1; }
echo "fresh clone: go run ./examples/quickstart works without cargo, and a rerun adds nothing"
