#!/usr/bin/env bash
# Builds the peer tools of the side-by-side benchmarks (issue #11) into
# $OPENETL_CACHE/bench, never into the repository: each from a writable
# copy of its module directory, so the root go.mod is untouched. Sourced
# by scripts/bench-compare.sh; also runnable alone:
#
#   bench/peers.sh build [conduit|benthos|canal]...
#
# `go install module/cmd@version` fails for these modules (the proxy
# refuses their version lists), hence go mod download + go build.
# Each build_NAME prints the binary's path on stdout, or fails with the
# reason in $BENCH_DIR/logs/build-NAME.log.

CONDUIT_VERSION=${CONDUIT_VERSION:-v0.14.0}
BENTHOS_VERSION=${BENTHOS_VERSION:-v4.60.0}
BENCH_DIR="${OPENETL_CACHE:-$HOME/.cache/openetl}/bench"
PEERS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# peer_build NAME MODULE VERSION CMDPKG: the binary $BENCH_DIR/bin/NAME-VERSION,
# built once from a copy of MODULE@VERSION's directory.
peer_build() {
  local name=$1 mod=$2 ver=$3 pkg=$4
  local bin="$BENCH_DIR/bin/$name-$ver" src="$BENCH_DIR/src/$name-$ver"
  local logf="$BENCH_DIR/logs/build-$name.log"
  mkdir -p "$BENCH_DIR/bin" "$BENCH_DIR/src" "$BENCH_DIR/logs"
  if [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi
  # One build of a peer at a time (two scripts may ask at once); the
  # second finds the binary once the first is done.
  local fd
  exec {fd}>"$BENCH_DIR/logs/build-$name.lock"
  flock "$fd"
  if [ -x "$bin" ]; then
    exec {fd}>&-
    echo "$bin"
    return 0
  fi
  {
    echo "== $(date -u +%FT%TZ) building $mod@$ver ($pkg)"
    local dir
    dir=$(cd "$BENCH_DIR" && GOFLAGS=-mod=mod GONOSUMDB=github.com/conduitio \
      go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || return 1
    [ -n "$dir" ] || { echo "go mod download gave no directory"; return 1; }
    rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
    local t0=$SECONDS
    (cd "$src" && GOFLAGS=-mod=mod GONOSUMDB=github.com/conduitio GOWORK=off \
      go build -trimpath -o "$bin.tmp" "$pkg") || return 1
    mv "$bin.tmp" "$bin"
    echo "== built in $((SECONDS - t0)) s"
  } >>"$logf" 2>&1 || { exec {fd}>&-; echo "peers.sh: building $name failed, see $logf" >&2; return 1; }
  exec {fd}>&-
  echo "$bin"
}

build_conduit() { peer_build conduit github.com/conduitio/conduit "$CONDUIT_VERSION" ./cmd/conduit; }
build_benthos() { peer_build benthos github.com/redpanda-data/benthos/v4 "$BENTHOS_VERSION" ./cmd/benthos; }

# build_canal: bench/mysqlcanal (go-mysql's canal with a no-op handler), a
# module of its own in the repository, built into the cache.
build_canal() {
  local bin="$BENCH_DIR/bin/mysqlcanal" logf="$BENCH_DIR/logs/build-canal.log"
  mkdir -p "$BENCH_DIR/bin" "$BENCH_DIR/logs"
  (cd "$PEERS_ROOT/bench/mysqlcanal" && GOWORK=off go build -o "$bin" .) >"$logf" 2>&1 ||
    { echo "peers.sh: building mysqlcanal failed, see $logf" >&2; return 1; }
  echo "$bin"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  [ "${1:-}" = build ] || { echo "usage: $0 build [conduit|benthos|canal]..." >&2; exit 2; }
  shift
  for p in "${@:-conduit benthos canal}"; do
    for q in $p; do "build_$q"; done
  done
fi
