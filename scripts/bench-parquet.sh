#!/usr/bin/env bash
# Measures the Parquet writers on the same batches, in one run: the
# engine's output for three workloads (Kafka-shaped JSON events, the
# 16-column Postgres table of make bench-compare, faker orders) written
# by sink/parquet under each codec setting with each encoder (arrow-go
# pqarrow, and the engine's arrow-rs writer through cgo), and the same
# batches written by arrow-rs's Parquet writer standalone
# (bench/parquet-rs, built here with cargo). Prints CPU nanoseconds a row and file bytes a
# row for each; BENCHMARKS.md ("Parquet writer: codecs and levels") has
# the current figures.
#
#   scripts/bench-parquet.sh [RUNS]      # default 3 writes per setting
#
# Needs Go and, for the arrow-rs column, cargo (crates.io); no servers.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
work=$(mktemp -d /tmp/bench-parquet.XXXX)
trap 'rm -rf "$work"' EXIT
target=${CARGO_TARGET_DIR:-${OPENETL_CACHE:-$HOME/.cache/openetl}/parquet-rs-target}
(cd bench/parquet-rs && CARGO_TARGET_DIR=$target cargo build --release --quiet)
OPENETL_BENCH_IPC_DIR=$work go test -run '^$' -bench '^BenchmarkCodecs$' -benchtime "${runs}x" -count 1 ./sink/parquet |
  awk '/^BenchmarkCodecs\//{n=$1; sub(/^BenchmarkCodecs\//,"",n); sub(/-[0-9]+$/,"",n);
    enc=n; sub(/.*\//,"",enc); sub(/\/[^\/]*$/,"",n);
    for(i=1;i<=NF;i++){ if($i=="cpu-ns/row") c=$(i-1); if($i=="B/row") b=$(i-1) }
    printf "%s\t%s\t%.0f cpu-ns/row\t%.2f B/row\n", n, enc, c, b }'
"$target/release/openetl-parquet-rs-bench" "$runs" "$work"/kafka.arrow "$work"/bench16.arrow "$work"/orders.arrow
