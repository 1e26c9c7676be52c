#!/usr/bin/env bash
# Writes THIRD_PARTY_NOTICES: every crate of engine/rust/Cargo.lock with its
# version and license expression (as its Cargo.toml states it), which of
# them the committed static library links, and the license and notice
# files those crates ship. Run it after any change to Cargo.lock and commit
# the result; TestThirdPartyNoticesMatchCargoLock (notices_test.go) fails
# while the file lists other crates or versions than the lock file.
#
#   scripts/notices.sh            # rewrite THIRD_PARTY_NOTICES
#   scripts/notices.sh -o FILE    # write FILE instead
#
# Needs cargo and python3. `cargo fetch --locked` brings the crates into
# cargo's registry cache when they are not there yet (the only step that
# may use the network); everything else reads that cache.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$ROOT/THIRD_PARTY_NOTICES
if [ "${1:-}" = "-o" ]; then OUT=$2; fi
MANIFEST=$ROOT/engine/rust/Cargo.toml
# The library is built for this target only (engine/build.sh).
TARGET=x86_64-unknown-linux-gnu

cargo fetch --locked --quiet --manifest-path "$MANIFEST"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo metadata --offline --locked --format-version 1 --manifest-path "$MANIFEST" >"$tmp/all.json"
cargo metadata --offline --locked --format-version 1 --manifest-path "$MANIFEST" \
  --filter-platform "$TARGET" >"$tmp/target.json"

python3 - "$tmp/all.json" "$tmp/target.json" "$ROOT/engine/rust/Cargo.lock" "$OUT.tmp" "$TARGET" <<'PY'
import json, os, sys

all_meta = json.load(open(sys.argv[1]))
tgt_meta = json.load(open(sys.argv[2]))
lock_path, out_path, target = sys.argv[3], sys.argv[4], sys.argv[5]

pkgs = {p["id"]: p for p in all_meta["packages"]}
nodes = {n["id"]: n for n in tgt_meta["resolve"]["nodes"]}
root = tgt_meta["resolve"]["root"]


def proc_macro(pid):
    return any("proc-macro" in t["kind"] for t in pkgs[pid]["targets"])


def edges(pid):
    for d in nodes[pid]["deps"]:
        yield d["pkg"], {k["kind"] for k in d["dep_kinds"]}


# Linked: normal dependencies of the library for the target, followed
# through normal dependencies, proc macros left out (they run in the
# compiler, and what they generate is part of the crate that uses them).
linked = set()
todo = [root]
while todo:
    pid = todo.pop()
    for dep, kinds in edges(pid):
        if None in kinds and not proc_macro(dep) and dep not in linked:
            linked.add(dep)
            todo.append(dep)

# Build: build scripts' dependencies and proc macros of the library or of a
# linked crate, with everything they depend on.
build = set()
todo = []
for pid in [root, *linked]:
    for dep, kinds in edges(pid):
        if "build" in kinds or (None in kinds and proc_macro(dep)):
            todo.append(dep)
while todo:
    pid = todo.pop()
    if pid in linked or pid in build:
        continue
    build.add(pid)
    for dep, kinds in edges(pid):
        if kinds - {"dev"}:
            todo.append(dep)

rows = []
for pid, p in pkgs.items():
    if pid == root:
        continue
    if pid in linked:
        role = "linked"
    elif pid in build:
        role = "build"
    elif pid in nodes:
        role = "test"
    else:
        role = "other"
    rows.append((p["name"], p["version"], role, p.get("license") or "", pid))
rows.sort(key=lambda r: (r[0], [int(x) if x.isdigit() else x for x in r[1].replace("+", ".").split(".")]))

# Every crate of the lock file must be accounted for, and only those.
lock = set()
name = None
for line in open(lock_path):
    line = line.strip()
    if line == "[[package]]":
        name = None
    elif line.startswith("name = "):
        name = json.loads(line[len("name = "):])
    elif line.startswith("version = ") and name is not None:
        lock.add((name, json.loads(line[len("version = "):])))
rootp = pkgs[root]
lock.discard((rootp["name"], rootp["version"]))
have = {(r[0], r[1]) for r in rows}
if have != lock:
    sys.exit("notices: cargo metadata and Cargo.lock disagree: %s" % sorted(have ^ lock))

LICENSE_PREFIXES = ("LICEN", "COPYING", "NOTICE", "UNLICENSE", "COPYRIGHT")


def license_files(p):
    d = os.path.dirname(p["manifest_path"])
    names = {f for f in os.listdir(d) if f.upper().startswith(LICENSE_PREFIXES) and os.path.isfile(os.path.join(d, f))}
    if p.get("license_file"):
        names.add(p["license_file"])
    return [(f, os.path.join(d, f)) for f in sorted(names)]


def normal(text):
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


texts = {}  # normalized text -> [crate file labels]
order = []
missing = []
for n, v, role, lic, pid in rows:
    if role != "linked":
        continue
    files = license_files(pkgs[pid])
    if not files:
        missing.append("%s %s" % (n, v))
    for f, path in files:
        t = normal(open(path, encoding="utf-8", errors="replace").read())
        if t not in texts:
            texts[t] = []
            order.append(t)
        texts[t].append("%s %s (%s)" % (n, v, f))

ROLES = [
    ("linked", "compiled into the static library"),
    ("build", "run only while building it: build scripts and procedural macros, with their dependencies"),
    ("test", "used only by the crate's tests"),
    ("other", "needed only on targets other than %s; not in the committed library" % target),
]
width_n = max(len(r[0]) for r in rows)
width_v = max(len(r[1]) for r in rows)
out = []
w = out.append
w("Third-party notices for OpenETL for Go")
w("")
w("Generated by scripts/notices.sh from engine/rust/Cargo.lock; do not edit.")
w("")
w("OpenETL itself is licensed under the Apache License 2.0 (LICENSE).")
w("")
w("The repository ships a prebuilt static library of the Rust engine,")
w("engine/lib/linux_amd64/libopenetl_engine.a, which every program that uses")
w("package engine (and so package etl) links on linux/amd64. It is built from")
w("engine/rust for %s with the crates marked \"linked\" below" % target)
w("and with Rust's standard library (MIT OR Apache-2.0). The Go modules a")
w("program links are fetched by the go command from their own sources under")
w("their own licenses (go.mod lists them) and are not part of this file.")
w("")
w("Roles:")
for role, what in ROLES:
    w("  %-7s %s" % (role, what))
w("")
w("Crates in engine/rust/Cargo.lock (role, name, version, license as the")
w("crate's Cargo.toml states it):")
w("")
for n, v, role, lic, pid in rows:
    w("%-7s %-*s %-*s %s" % (role, width_n, n, width_v, v, lic or "(none stated)"))
w("")
if missing:
    w("Linked crates whose package ships no license file: " + ", ".join(missing))
    w("")
w("License and notice files of the linked crates follow, each text once,")
w("after the list of the crates and files that carry it.")
for t in order:
    w("")
    w("=" * 78)
    for label in texts[t]:
        w(label)
    w("-" * 78)
    w(t)
w("")
open(out_path, "w").write("\n".join(out))
PY
mv "$OUT.tmp" "$OUT"
