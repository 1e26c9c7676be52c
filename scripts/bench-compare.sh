#!/usr/bin/env bash
# Side-by-side benchmarks against peers (issue #11): prepares the data,
# runs each scenario for OpenETL (bench/cmd/openetl-bench), its ceiling
# and each peer it could build, checks every run's output against the
# source (count and a checksum over ids: a fast wrong answer is a
# failure, not a number), and writes a Markdown table between the
# bench-compare markers at the end of BENCHMARKS.md.
#
#   make bench-compare                       # full size, 5 runs each, 45-minute budget
#   RUNS=2 ROWS=small scripts/bench-compare.sh   # quick pass (a few minutes)
#
# Settings (environment):
#   RUNS        runs per tool and scenario for OpenETL and the ceilings
#               (default 5); the table shows the median and min–max
#   PEER_RUNS   runs of each peer (default 1 at full size, else RUNS):
#               peers are the slowest part of a full-size pass
#   ROWS        full (default: 5M Postgres rows, 2M changes, 10M Kafka
#               messages, 5M Arrow rows) or small (100k rows, 50k
#               changes, 200k messages, 200k rows)
#   PG_ROWS, CDC_CHANGES, KAFKA_MSGS, ARROW_ROWS   override the sizes
#               (CDC_CHANGES is the Postgres and the MariaDB change count)
#   ARROW_PG_ROWS  the Arrow rows written into Postgres (default 500k at
#               full size, 100k small: the writer stages every row and
#               copies it, appended and merged: 1-2 min at full size)
#   CH_KAFKA_MSGS  the messages kafka-clickhouse moves (default 1M at
#               full size, else KAFKA_MSGS): kafka-broker's topic when the
#               sizes are equal, else a topic of its own; each run stores
#               them in a MergeTree table and reads them back
#   KFAKE_MSGS  the messages on kfake (default KAFKA_MSGS), filled once
#               into a kfake process of its own that every run reads
#   AVRO_MSGS   the Avro messages on the broker (kafka-avro; default 2M at
#               full size, else KAFKA_MSGS): the Kafka messages' values in
#               Avro, through scripts/servers.sh's registry
#   PEER_PG_ROWS, PEER_CDC_CHANGES, PEER_KAFKA_MSGS   the sizes Conduit
#               and Benthos run at (default at full size: 200k rows,
#               200k changes, 1M messages; never more than the sizes
#               above). Conduit moved 6–28k rows/s here, so at full size
#               it alone would take most of the budget; its rows are
#               labelled with their size (rows/s and CPU-s per million
#               rows stay comparable). canal runs at the full size.
#   SCENARIOS   default "pg-snapshot pg-cdc mariadb-cdc kafka-kfake
#               kafka-broker kafka-avro ndjson arrow-parquet
#               arrow-clickhouse kafka-clickhouse arrow-postgres"; also
#               kafka-chcluster (not by default: the budget): the
#               kafka-clickhouse messages into scripts/servers.sh's
#               chcluster (2 shards x 2 replicas, ZooKeeper) at 1 and 2
#               shard targets
#   PEERS       default "conduit benthos canal"; "" runs OpenETL and ceilings only
#   BUDGET_MIN  the whole run's budget in minutes (default 45). The
#               script prints its estimate per scenario first (from the
#               per-million-row times in est_rate, measured here); each
#               step is killed after several times its estimate, and no
#               run starts past the budget: both are reported as FAIL in
#               the table and the script exits 1 (the table is still
#               written).
#   BUDGET_ONLY set: print the estimate and exit (1 when it is over the budget)
#   BENCH_OUT   the Markdown file to update (default BENCHMARKS.md)
#
# Servers come from scripts/servers.sh (started here, stopped on exit,
# with every process this script started: nothing is left running).
# When the machine has 2+ cores, the database or broker is pinned to core
# 0 and the tool under test to core 1 (taskset), so each gets one core;
# scenarios without a server give the tool every core. Peers are built
# by bench/peers.sh into $OPENETL_CACHE/bench, never into the repository;
# a peer that fails to build or run is reported in the table with the
# reason.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export OPENETL_CACHE="${OPENETL_CACHE:-$HOME/.cache/openetl}"
# shellcheck source=../bench/peers.sh
source "$ROOT/bench/peers.sh"

RUNS=${RUNS:-5}
ROWS=${ROWS:-full}
case $ROWS in
full)
  PG_ROWS=${PG_ROWS:-5000000} KAFKA_MSGS=${KAFKA_MSGS:-10000000} ARROW_ROWS=${ARROW_ROWS:-5000000} CDC_CHANGES=${CDC_CHANGES:-2000000}
  ARROW_PG_ROWS=${ARROW_PG_ROWS:-500000}
  PEER_RUNS=${PEER_RUNS:-1} PEER_PG_ROWS=${PEER_PG_ROWS:-200000} PEER_CDC_CHANGES=${PEER_CDC_CHANGES:-200000}
  PEER_KAFKA_MSGS=${PEER_KAFKA_MSGS:-1000000} AVRO_MSGS=${AVRO_MSGS:-2000000}
  ;;
small)
  PG_ROWS=${PG_ROWS:-100000} KAFKA_MSGS=${KAFKA_MSGS:-200000} ARROW_ROWS=${ARROW_ROWS:-200000} CDC_CHANGES=${CDC_CHANGES:-50000}
  ARROW_PG_ROWS=${ARROW_PG_ROWS:-100000}
  ;;
*) echo "bench-compare: ROWS is full or small, not $ROWS" >&2; exit 2 ;;
esac
PEER_RUNS=${PEER_RUNS:-$RUNS}
KFAKE_MSGS=${KFAKE_MSGS:-$KAFKA_MSGS}
if [ "$ROWS" = full ]; then CH_KAFKA_MSGS=${CH_KAFKA_MSGS:-1000000}; else CH_KAFKA_MSGS=${CH_KAFKA_MSGS:-$KAFKA_MSGS}; fi
AVRO_MSGS=${AVRO_MSGS:-$KAFKA_MSGS}
PEER_PG_ROWS=$((${PEER_PG_ROWS:-$PG_ROWS} < PG_ROWS ? ${PEER_PG_ROWS:-$PG_ROWS} : PG_ROWS))
PEER_CDC_CHANGES=$((${PEER_CDC_CHANGES:-$CDC_CHANGES} < CDC_CHANGES ? ${PEER_CDC_CHANGES:-$CDC_CHANGES} : CDC_CHANGES))
PEER_KAFKA_MSGS=$((${PEER_KAFKA_MSGS:-$KAFKA_MSGS} < KAFKA_MSGS ? ${PEER_KAFKA_MSGS:-$KAFKA_MSGS} : KAFKA_MSGS))
BUDGET_MIN=${BUDGET_MIN:-45}
SCENARIOS=${SCENARIOS:-pg-snapshot pg-cdc mariadb-cdc kafka-kfake kafka-broker kafka-avro ndjson arrow-parquet arrow-clickhouse kafka-clickhouse arrow-postgres}
PEERS=${PEERS-conduit benthos canal}
BENCH_OUT=${BENCH_OUT:-$ROOT/BENCHMARKS.md}
WORK="$BENCH_DIR/work"
RESULTS="$WORK/results.tsv"
NOTES="$WORK/notes.txt"
BIN="$BENCH_DIR/bin/openetl-bench"
PG_TABLE="bench16_$PG_ROWS"

log() { echo "bench-compare: $*" >&2; }
has() { [[ " $SCENARIOS " == *" $1 "* ]]; }
peer() { [[ " $PEERS " == *" $1 "* ]]; }
note() { echo "$*" >>"$NOTES"; log "note: $*"; }

if [ "$(nproc)" -ge 2 ]; then
  DB_CPU=0 TOOL_CPU=1 ALL_CPUS=0-$(($(nproc) - 1))
else
  DB_CPU=0 TOOL_CPU=0 ALL_CPUS=0
fi

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$SECONDS
DEADLINE=$((T_START + BUDGET_MIN * 60))
OVER= SPENT=

# ------------------------------------------------------------ budget

# EST_RATE[KEY]: wall seconds per million rows of one step (its check
# included) on this 2-core machine: from the full-size pass of
# 2026-11-30 21:36 UTC (f397baf, 1 run each, at load 1.7–4.6 with other
# jobs on the machine), rounded up. At load 6–8 steps took up to 2x
# these (the pass of 21:00 UTC, before sink/parquet's dictionary
# change). KEY is SCENARIO/TOOL, or a preparation step. EST_STEP is each
# step's fixed cost (process start, slots, pipeline state, the checker's
# start).
declare -A EST_RATE=(
  [pg-fill]=11 [pg-snapshot/ceiling]=2.5 [pg-snapshot/openetl]=7.5 [pg-snapshot/conduit]=120
  [pg-cdc/changes]=10 [pg-cdc/ceiling]=11 [pg-cdc/openetl]=7 [pg-cdc/conduit]=150
  [mariadb-cdc/changes]=8 [mariadb-cdc/ceiling]=5 [mariadb-cdc/openetl]=6 [mariadb-cdc/canal]=5
  [kafka-kfake/produce]=3 [kafka-kfake/ceiling]=1.5 [kafka-kfake/openetl]=6
  [kafka-broker/produce]=5 [kafka-broker/ceiling]=1 [kafka-broker/openetl]=4.5 [kafka-broker/conduit]=30
  [kafka-avro/produce]=5 [kafka-avro/ceiling]=1 [kafka-avro/openetl]=4.5
  [ndjson/produce]=1 [ndjson/benthos]=60
  [arrow-parquet/ceiling]=1.5 [arrow-parquet/openetl]=1.5
  [arrow-clickhouse/ceiling]=1.2 [arrow-clickhouse/openetl]=1.2
  [arrow-clickhouse-mt/ceiling]=2 [arrow-clickhouse-mt/openetl]=3.5
  [arrow-postgres/ceiling]=4 [arrow-postgres/openetl]=7
  [kafka-clickhouse/ceiling]=7 [kafka-clickhouse/openetl]=5 [kafka-chcluster/openetl]=7
)
EST_STEP=4

# arrow-postgres's are from a RUNS=2 ROWS=small pass of 2026-12-02 at
# load 4-5: ceiling ~320k rows/s, the writer's append ~240k and merge
# ~180k (its openetl key is per leg, two legs a run); at load 15-30
# all three were 2-4x slower.
# est KEY N [TIMES]: the estimated seconds of TIMES (default 1) steps of
# KEY over N rows.
est() {
  awk -v r="${EST_RATE[$1]:-10}" -v n="$2" -v t="${3:-1}" -v f="$EST_STEP" 'BEGIN {printf "%d", t * (f + r * n / 1e6) + 0.5}'
}

# step_limit KEY N: how long one step may take before it is killed:
# four times its estimate plus a minute, and never past the budget's end
# (30 s at least, so a step started just in time is not killed at once).
step_limit() {
  local e lim left
  e=$(est "$1" "$2")
  lim=$((4 * e + 60))
  left=$((DEADLINE - SECONDS))
  ((left < 30)) && left=30
  ((lim > left)) && lim=$left
  echo "$lim"
}

# in_budget WHAT: false (and noted, once) when the budget is spent; the
# scenarios ask before every run, so nothing new starts past it.
in_budget() {
  ((SECONDS < DEADLINE)) && return 0
  if [ -z "$SPENT" ]; then
    note "OVER BUDGET: $1 and everything after it not run: the $BUDGET_MIN-minute budget was spent"
  fi
  OVER=1 SPENT=1
  return 1
}

# bounded KEY N WHAT CMD...: a preparation step under its step limit; one
# that takes longer stops the script (the trap stops every server).
bounded() {
  local lim rc=0
  lim=$(step_limit "$1" "$2")
  local what=$3
  shift 3
  timeout -k 10 "$lim" "$@" || rc=$?
  if ((rc == 124 || rc == 137)); then
    log "FAIL: $what took more than its budget of $lim s; stopping"
    exit 1
  fi
  return "$rc"
}

# estimate SCENARIO: its estimated seconds, preparation and peers included.
estimate() {
  local peers_on=0 t=0
  case $1 in
  pg-snapshot)
    t=$(($(est pg-fill "$((PG_ROWS + PEER_PG_ROWS))") + $(est pg-snapshot/ceiling "$PG_ROWS" "$RUNS") + $(est pg-snapshot/openetl "$PG_ROWS" "$RUNS")))
    peer conduit && t=$((t + $(est pg-snapshot/conduit "$PEER_PG_ROWS" $((2 * PEER_RUNS)))))
    ;;
  pg-cdc)
    t=$(($(est pg-cdc/changes "$CDC_CHANGES") + $(est pg-cdc/ceiling "$CDC_CHANGES" $((2 * RUNS))) + $(est pg-cdc/openetl "$CDC_CHANGES" "$RUNS")))
    peer conduit && t=$((t + $(est pg-cdc/changes "$PEER_CDC_CHANGES") + $(est pg-cdc/conduit "$PEER_CDC_CHANGES" $((2 * PEER_RUNS)))))
    ;;
  mariadb-cdc)
    t=$(($(est mariadb-cdc/changes "$CDC_CHANGES") + $(est mariadb-cdc/ceiling "$CDC_CHANGES" "$RUNS") + $(est mariadb-cdc/openetl "$CDC_CHANGES" "$RUNS") + EST_STEP * RUNS))
    peer canal && t=$((t + $(est mariadb-cdc/canal "$CDC_CHANGES" "$PEER_RUNS")))
    ;;
  kafka-kfake) t=$(($(est kafka-kfake/produce "$KFAKE_MSGS") + $(est kafka-kfake/ceiling "$KFAKE_MSGS" "$RUNS") + $(est kafka-kfake/openetl "$KFAKE_MSGS" "$RUNS"))) ;;
  kafka-broker)
    t=$(($(est kafka-broker/produce "$KAFKA_MSGS") + $(est kafka-broker/ceiling "$KAFKA_MSGS" "$RUNS") + $(est kafka-broker/openetl "$KAFKA_MSGS" "$RUNS")))
    peer conduit && t=$((t + $(est kafka-broker/produce "$PEER_KAFKA_MSGS") + $(est kafka-broker/conduit "$PEER_KAFKA_MSGS" "$PEER_RUNS")))
    ;;
  kafka-avro) t=$(($(est kafka-avro/produce "$AVRO_MSGS") + $(est kafka-avro/ceiling "$AVRO_MSGS" "$RUNS") + $(est kafka-avro/openetl "$AVRO_MSGS" "$RUNS"))) ;;
  ndjson) peer benthos && t=$(($(est ndjson/produce "$PEER_KAFKA_MSGS") + $(est ndjson/benthos "$PEER_KAFKA_MSGS" "$PEER_RUNS"))) ;;
  arrow-parquet) t=$(($(est arrow-parquet/ceiling "$ARROW_ROWS" "$RUNS") + $(est arrow-parquet/openetl "$ARROW_ROWS" "$RUNS"))) ;;
  arrow-clickhouse)
    t=$(($(est arrow-clickhouse/ceiling "$ARROW_ROWS" "$RUNS") + $(est arrow-clickhouse/openetl "$ARROW_ROWS" "$RUNS")
      + $(est arrow-clickhouse-mt/ceiling "$ARROW_ROWS") + $(est arrow-clickhouse-mt/openetl "$ARROW_ROWS")))
    ;;
  kafka-clickhouse)
    t=$(($(est kafka-clickhouse/ceiling "$CH_KAFKA_MSGS" "$RUNS") + $(est kafka-clickhouse/openetl "$CH_KAFKA_MSGS" "$RUNS")))
    # Its messages are kafka-broker's when that scenario runs first at the same size.
    { has kafka-broker && ((CH_KAFKA_MSGS == KAFKA_MSGS)); } || t=$((t + $(est kafka-broker/produce "$CH_KAFKA_MSGS")))
    ;;
  kafka-chcluster)
    t=$(est kafka-chcluster/openetl "$CH_KAFKA_MSGS" $((2 * RUNS)))
    { { has kafka-broker && ((CH_KAFKA_MSGS == KAFKA_MSGS)); } || has kafka-clickhouse; } || t=$((t + $(est kafka-broker/produce "$CH_KAFKA_MSGS")))
    ;;
  arrow-postgres) t=$(($(est arrow-postgres/ceiling "$ARROW_PG_ROWS" "$RUNS") + $(est arrow-postgres/openetl "$ARROW_PG_ROWS" $((2 * RUNS))))) ;;
  esac
  echo "$t"
}

# run_scenario NAME FUNC: FUNC, its time recorded beside its estimate.
run_scenario() {
  in_budget "scenario $1" || return 0
  local t0=$SECONDS
  log "scenario $1 (estimated $(($(estimate "$1") / 60)) min)"
  "$2"
  printf '%s\t%s\t%s\n' "$1" "$(estimate "$1")" "$((SECONDS - t0))" >>"$WORK/times.tsv"
}

EST_TOTAL=60
{
  echo "bench-compare: time budget ($BUDGET_MIN min; estimates from EST_RATE, measured at load 2-4: a busier machine is slower, and the budget stops it):"
  for sc in $SCENARIOS; do
    e=$(estimate "$sc")
    EST_TOTAL=$((EST_TOTAL + e))
    printf '  %-18s %4d s\n' "$sc" "$e"
  done
  printf '  %-18s %4d s\n' "builds, servers" 60
  printf '  %-18s %4d s (%d min)\n' total "$EST_TOTAL" $(((EST_TOTAL + 59) / 60))
} >&2
if ((EST_TOTAL > BUDGET_MIN * 60)); then
  log "WARNING: the estimate is over the $BUDGET_MIN-minute budget; what does not fit is stopped and reported as FAIL (set RUNS, PEER_RUNS, ROWS, SCENARIOS or BUDGET_MIN)"
fi
if [ -n "${BUDGET_ONLY:-}" ]; then
  ((EST_TOTAL <= BUDGET_MIN * 60))
  exit
fi

rm -rf "$WORK"
mkdir -p "$WORK"
: >"$NOTES"
: >"$WORK/times.tsv"
: >"$WORK/chserver.tsv"
printf 'scenario\ttool\tsetting\trun\trows\tseconds\tcpu\trss_mb\tok\tdetail\tload\n' >"$RESULTS"

# ------------------------------------------------------------ build

# Peer builds run in the background from here, beside the set-up that
# times nothing (openetl-bench's build, the test tools, the servers, the
# first scenario's data): on a cold cache they take about 12 minutes of
# this 2-core machine (Conduit ~6-7, Benthos ~5). The first timed step
# waits for them (await_peers), so no measurement shares the CPU with a
# compiler.
PEER_BUILDS=()
CONDUIT= BENTHOS=
if peer conduit && { has pg-snapshot || has pg-cdc || has kafka-broker; }; then
  log "building Conduit $CONDUIT_VERSION in the background (minutes on a cold cache)"
  (build_conduit >"$WORK/conduit.path") &
  PEER_BUILDS+=("conduit:$!")
fi
if peer benthos && has ndjson; then
  log "building Benthos $BENTHOS_VERSION in the background"
  (build_benthos >"$WORK/benthos.path") &
  PEER_BUILDS+=("benthos:$!")
fi

# await_peers: wait for the background peer builds (once) and set
# CONDUIT and BENTHOS to their binaries, or note why there is none.
await_peers() {
  ((${#PEER_BUILDS[@]})) || return 0
  local e name pid t0=$SECONDS
  log "waiting for the peer builds"
  for e in "${PEER_BUILDS[@]}"; do
    name=${e%%:*} pid=${e#*:}
    if wait "$pid"; then
      case $name in
      conduit) CONDUIT=$(cat "$WORK/conduit.path") ;;
      benthos) BENTHOS=$(cat "$WORK/benthos.path") ;;
      esac
    else
      case $name in
      conduit) note "Conduit $CONDUIT_VERSION: build failed ($(tail -1 "$BENCH_DIR/logs/build-conduit.log"))" ;;
      benthos) note "Benthos $BENTHOS_VERSION: build failed ($(tail -1 "$BENCH_DIR/logs/build-benthos.log"))" ;;
      esac
    fi
  done
  PEER_BUILDS=()
  log "peer builds done (waited $((SECONDS - t0)) s)"
}

log "building openetl-bench"
# What it is built from, taken now (HEAD may move during a long run):
# the commit, and the files changed since outside the benchmark's own.
BUILT_FROM=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILT_DIRTY=$(git status --porcelain -- . ':!bench' ':!scripts/bench-compare.sh' ':!BENCHMARKS.md' 2>/dev/null |
  awk '{print $2}' | head -5 | paste -sd, - || true)
go build -o "$BIN" ./bench/cmd/openetl-bench
PY=$(scripts/test-tools.sh)


# ------------------------------------------------------------ servers

services=()
{ has pg-snapshot || has pg-cdc || has arrow-postgres; } && services+=(postgres)
{ has kafka-broker || has kafka-avro || has kafka-clickhouse || has kafka-chcluster; } && services+=(kafka)
has kafka-avro && services+=(registry)
has mariadb-cdc && services+=(mariadb)
{ has arrow-clickhouse || has kafka-clickhouse; } && services+=(clickhouse)
has kafka-chcluster && services+=(chcluster)
SERVERS_DIR=
PEER_PIDS=()
# stop_servers: on any exit, the step running (its timeout, which passes
# the signal on to the tool), the peer's processes and the servers, each
# by its id.
stop_servers() {
  local p kids
  kids=$(ps -o pid= --ppid $$ 2>/dev/null || true)
  for p in $kids "${PEER_PIDS[@]}"; do
    [ "$p" = "$BASHPID" ] || kill "$p" 2>/dev/null || true
  done
  if [ -n "$SERVERS_DIR" ]; then
    scripts/servers.sh stop "$SERVERS_DIR" >/dev/null 2>&1 || true
  fi
}
trap stop_servers EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM
if [ ${#services[@]} -gt 0 ]; then
  unset OPENETL_SERVERS_DIR
  log "starting ${services[*]}"
  env=$(scripts/servers.sh start "${services[@]}")
  eval "$env"
  SERVERS_DIR=$OPENETL_SERVERS_DIR
fi

# pin NAME CPU: every process of the service's session onto CPU (new
# Postgres backends inherit the postmaster's affinity).
pin() {
  local pid sid p
  pid=$(cat "$SERVERS_DIR/$1.pid")
  sid=$(ps -o sid= -p "$pid" | tr -d ' ')
  for p in $(ps -eo pid=,sid= | awk -v s="$sid" '$2 == s {print $1}'); do
    taskset -a -p -c "$2" "$p" >/dev/null 2>&1 || true
  done
}

PSQL=(psql -X -q -v ON_ERROR_STOP=1 -At)
pg() { "${PSQL[@]}" "$OPENETL_TEST_POSTGRES_DSN" -c "$1"; }

# ------------------------------------------------------------ measuring

# result SCENARIO TOOL SETTING RUN ROWS SECONDS CPU RSS OK DETAIL: one
# row of the results, with the 1-minute load average at its end.
result() {
  local IFS=$'\t'
  echo "$*"$'\t'"$(cut -d' ' -f1 /proc/loadavg)" >>"$RESULTS"
}

# jget FILE KEY...: a value from a JSON object (nested keys).
jget() {
  python3 -c 'import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v=v.get(k) if isinstance(v,dict) else None
print("" if v is None else v)' "$@"
}

# check_ids JSON N: "ok" when the check object in JSON holds exactly the
# ids 1..N, else what differs.
check_ids() {
  python3 -c 'import json,sys
c=json.load(open(sys.argv[1])); n=int(sys.argv[2])
want={"count":n,"distinct":n,"min":1,"max":n,"sum":n*(n+1)//2}
bad=[f"{k} {c.get(k)} != {v}" for k,v in want.items() if c.get(k)!=v]
if c.get("bad_lines"): bad.append("%d lines without an id" % c["bad_lines"])
print("ok" if not bad else "; ".join(bad))' "$1" "$2"
}

# check_json JSON: the check object of openetl-bench's JSON, with its
# change kinds (ops) when it has them, for check_ids and check_cdc.
check_json() {
  python3 -c 'import json,sys
j=json.load(open(sys.argv[1])); c=j.get("check") or {}
if j.get("ops"): c["ops"]=j["ops"]
print(json.dumps(c))' "$1"
}

# driver SCENARIO TOOL SETTING RUN N CPUS ARGS...: one openetl-bench run,
# killed after its step limit. Its JSON gives the timed section's wall
# and CPU seconds and peak RSS; the Parquet files it lists are read back
# with pyarrow and their ids checked against 1..N (N "cdc": check_cdc);
# a check object it gives (the bare pglogrepl loop) is checked the same
# way; other ceilings are checked by row count.
driver() {
  local sc=$1 tool=$2 set=$3 run=$4 n=$5 cpus=$6
  shift 6
  local out="$WORK/$sc-$tool-$run.json" ok detail rc=0 lim
  await_peers
  lim=$(step_limit "$sc/$tool" "$([ "$n" = cdc ] && echo "$CDC_CHANGES" || echo "$n")")
  timeout -k 10 "$lim" taskset -c "$cpus" "$BIN" "$@" >"$out" 2>"$out.err" || rc=$?
  if ((rc == 124 || rc == 137)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "over its step budget of $lim s (killed)"
    OVER=1
    return 0
  elif ((rc != 0)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "$(tail -1 "$out.err")"
    return 0
  fi
  local files
  files=$(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1])).get("files") or []))' "$out")
  if [ -z "$files" ] && [ -n "$(jget "$out" check count)" ]; then
    check_json "$out" >"$out.check"
    if [ "$n" = cdc ]; then ok=$(check_cdc "$out.check"); else ok=$(check_ids "$out.check" "$n"); fi
  elif [ -n "$files" ] && [ "$n" = cdc ]; then
    mapfile -t fl <<<"$files"
    "$PY" bench/check_parquet.py --ops "${fl[@]}" >"$out.check"
    ok=$(check_cdc "$out.check")
  elif [ -n "$files" ]; then
    mapfile -t fl <<<"$files"
    "$PY" bench/check_parquet.py "${fl[@]}" >"$out.check"
    ok=$(check_ids "$out.check" "$n")
  elif [ "$(jget "$out" rows)" = "$n" ]; then
    ok=ok
  else
    ok="rows $(jget "$out" rows) != $n"
  fi
  detail=$ok
  [ "$ok" = ok ] || ok=FAIL
  result "$sc" "$tool" "$set" "$run" "$(jget "$out" rows)" "$(jget "$out" seconds)" \
    "$(jget "$out" cpu_seconds)" "$(jget "$out" peak_rss_mb)" "$ok" "$detail"
}

# timed OUTFILE CPUS LIMIT CMD...: run CMD under /usr/bin/time, killed
# after LIMIT seconds (exit status 124 or 137); OUTFILE gets "elapsed
# user sys maxrss_kb".
timed() {
  local tf=$1 cpus=$2 lim=$3
  shift 3
  await_peers
  /usr/bin/time -f '%e %U %S %M' -o "$tf" timeout -k 10 "$lim" taskset -c "$cpus" "$@"
}

# ------------------------------------------------------------ pg-snapshot

# pg_prepare TABLE ROWS: the 16-column table TABLE holding ids 1..ROWS.
pg_prepare() {
  local tb=$1 rows=$2
  if [ "$(pg "SELECT count(*) FROM pg_tables WHERE tablename = '$tb'")" = 1 ] &&
    [ "$(pg "SELECT count(*) FROM $tb")" = "$rows" ]; then
    return 0
  fi
  log "filling $tb with $rows rows"
  pg "DROP TABLE IF EXISTS $tb"
  pg "CREATE TABLE $tb (id int8 PRIMARY KEY, a int4, b int8, c float8, d numeric(12,2), e text,
    f bool, g timestamptz, h date, i uuid, j text, k int2, l float4, m varchar(32), n int8, o timestamp)"
  bounded pg-fill "$rows" "filling $tb" "${PSQL[@]}" "$OPENETL_TEST_POSTGRES_DSN" -c "INSERT INTO $tb SELECT g, g % 100000, g::int8 * 7919, g / 7.0, (g % 1000000) / 100.0,
    'customer ' || g, g % 3 = 0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
    date '2020-01-01' + (g % 3000), md5(g::text)::uuid, repeat('x', g % 40), (g % 30000)::int2,
    (g % 1000) / 8.0, 'status-' || (g % 7), g::int8 * 31, timestamp '2024-06-01' + g * interval '1 millisecond'
    FROM generate_series(1, $rows) g"
  pg "VACUUM ANALYZE $tb"
}

drop_slot() {
  pg "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$1' AND NOT active" >/dev/null || true
}

# conduit_follow SCENARIO SETTING RUN DIR MARKER N CHECK [FLAG...]: runs
# Conduit on DIR/pipeline.yaml (its source never stops on its own: it
# goes on streaming changes), timed from its start until DIR/out.jsonl
# holds N complete records, then stopped. The follower reads the file as
# it grows, on the database's core, summing the id after MARKER on each
# line; CHECK is "ids" (exactly 1..N) or "cdc" (check_cdc).
conduit_follow() {
  local sc=$1 set=$2 run=$3 dir=$4 marker=$5 n=$6 check=$7
  shift 7
  local t0 tpid cpid ok=FAIL detail rows=0 secs=0 lim
  lim=$(step_limit "$sc/conduit" "$n")
  t0=$(date +%s%N)
  (cd "$dir" && exec /usr/bin/time -f '%e %U %S %M' -o "$dir/time" taskset -c "$TOOL_CPU" \
    "$CONDUIT" run --pipelines.path "$dir/pipeline.yaml" --db.type inmemory --api.enabled=false \
    --log.level warn --log.format json --pipelines.exit-on-degraded "$@") >"$dir/log" 2>&1 &
  tpid=$!
  sleep 0.5
  PEER_PIDS=("$tpid" $(ps -o pid= --ppid "$tpid"))
  taskset -c "$DB_CPU" "$BIN" check-jsonl -file "$dir/out.jsonl" -after "$marker" -n "$n" \
    -wait -since "$t0" -timeout "${lim}s" >"$dir/check.json" 2>"$dir/check.err" &
  local fpid=$! i=0 size=-1 same=0 now
  PEER_PIDS+=("$fpid")
  # A Conduit that exits (a failed pipeline) ends the wait too, and so
  # does one whose Postgres source failed three times (Conduit restarts
  # a failed pipeline with a backoff, from its last acknowledged
  # position, for ever), or whose output stopped growing for 30 s.
  while kill -0 "$fpid" 2>/dev/null; do
    if ! kill -0 "$tpid" 2>/dev/null; then
      sleep 2
      kill "$fpid" 2>/dev/null || true
      echo "conduit exited before writing $n records" >>"$dir/check.err"
      break
    fi
    if ((++i % 5 == 0)) && (($(grep -c '"message":"replication exited with an error"' "$dir/log") >= 3)); then
      kill "$fpid" 2>/dev/null || true
      echo "conduit's pipeline failed and restarted 3 times, at $(wc -l <"$dir/out.jsonl") of $n records" >>"$dir/check.err"
      break
    fi
    if ((i % 5 == 0)); then
      now=$(stat -c %s "$dir/out.jsonl" 2>/dev/null || echo 0)
      if ((now == size)); then same=$((same + 1)); else same=0 size=$now; fi
      if ((same >= 30)); then
        kill "$fpid" 2>/dev/null || true
        echo "conduit's output stalled for 30 s at $(wc -l <"$dir/out.jsonl" 2>/dev/null || echo 0) of $n records" >>"$dir/check.err"
        break
      fi
    fi
    sleep 0.2
  done
  if wait "$fpid"; then
    rows=$(jget "$dir/check.json" rows)
    secs=$(jget "$dir/check.json" seconds)
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["check"]))' "$dir/check.json" >"$dir/ids.json"
    if [ "$check" = cdc ]; then
      detail=$(check_cdc "$dir/ids.json" "$n")
    else
      detail=$(check_ids "$dir/ids.json" "$n")
    fi
    [ "$detail" = ok ] && ok=ok
  else
    detail="no complete output (step budget $lim s): $(tail -1 "$dir/check.err"); conduit's first error: $(grep -m1 '"level":"error"' "$dir/log" | sed -n 's/.*"error":"\([^"]*\)".*/\1/p' | cut -c1-200)"
  fi
  # Stop Conduit (the child of time, itself the subshell's exec) by id.
  cpid=$(ps -o pid= --ppid "$tpid" | tr -d ' ' | head -1)
  if [ -n "$cpid" ]; then
    kill "$cpid" 2>/dev/null || true
    sleep 2
    kill -9 "$cpid" 2>/dev/null || true
  fi
  wait "$tpid" 2>/dev/null || true
  PEER_PIDS=()
  local cpu=0 rss=0
  if [ -s "$dir/time" ] && [[ "$(tail -1 "$dir/time")" =~ ^[0-9.]+\ [0-9.]+\ [0-9.]+\ [0-9]+$ ]]; then
    read -r _ u s m < <(tail -1 "$dir/time")
    cpu=$(python3 -c "print($u + $s)") rss=$(python3 -c "print($m / 1024)")
  fi
  result "$sc" conduit "$set" "$run" "$rows" "$secs" "$cpu" "$rss" "$ok" "$detail"
  rm -f "$dir/out.jsonl"
}

# conduit_run RUN SETTING: Conduit postgres → file, snapshot then CDC,
# with its defaults or with its performance advice (pipeline
# architecture v2, sdk.batch.size 10000, schema extraction off), on the
# PEER_PG_ROWS table.
conduit_run() {
  local run=$1 set=$2 dir="$WORK/conduit-$2-$1" tb="bench16_$PEER_PG_ROWS"
  mkdir -p "$dir"
  local slot="conduit_slot_$run" pub="conduit_pub" extra=() batch=""
  if [ "$set" = advised ]; then
    extra=(--preview.pipeline-arch-v2)
    batch="
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms
          sdk.schema.extract.payload.enabled: 'false'
          sdk.schema.extract.key.enabled: 'false'
          logrepl.withAvroSchema: 'false'"
  fi
  cat >"$dir/pipeline.yaml" <<EOF
version: "2.2"
pipelines:
  - id: bench
    status: running
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: '$OPENETL_TEST_POSTGRES_DSN'
          tables: '$tb'
          snapshotMode: initial
          cdcMode: logrepl
          logrepl.slotName: '$slot'
          logrepl.publicationName: '$pub'$batch
      - id: file
        type: destination
        plugin: builtin:file
        settings:
          path: '$dir/out.jsonl'${batch:+
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms}
EOF
  local label="defaults"
  [ "$set" = advised ] && label="arch v2, batch 10000 (100 ms), no schema extraction"
  conduit_follow pg-snapshot "$label" "$run" "$dir" '"after":' "$PEER_PG_ROWS" ids "${extra[@]}"
  sleep 1
  drop_slot "$slot"
}

scenario_pg_snapshot() {
  pin postgres "$DB_CPU"
  pg_prepare "$PG_TABLE" "$PG_ROWS"
  # Conduit's table is filled while its build may still run.
  if peer conduit; then pg_prepare "bench16_$PEER_PG_ROWS" "$PEER_PG_ROWS"; fi
  local r
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "pg-snapshot run $r" || break
    log "pg-snapshot run $r of $RUNS"
    driver pg-snapshot ceiling "COPY binary → discard" "$r" "$PG_ROWS" "$TOOL_CPU" pg-copy -table "$PG_TABLE"
    rm -rf "$WORK/pg-out"
    driver pg-snapshot openetl "Parquet zstd, defaults" "$r" "$PG_ROWS" "$TOOL_CPU" \
      pg-snapshot -table "$PG_TABLE" -pub "${PG_TABLE}_pub" -slot "bench_slot_$r" -out "$WORK/pg-out"
    drop_slot "bench_slot_$r"
    rm -rf "$WORK/pg-out"
    if [ -n "$CONDUIT" ] && ((r <= PEER_RUNS)); then
      conduit_run "$r" defaults
      conduit_run "$r" advised
    fi
  done
}

# ------------------------------------------------------------ pg-cdc

CDC_TABLE=bench_cdc CDC_PUB=bench_cdc_pub

# cdc_mix N: "I U D", the inserts, updates and deletes of N changes
# (50%, 30%, 20%).
cdc_mix() { echo "$(($1 / 2)) $(($1 * 3 / 10)) $(($1 - $1 / 2 - $1 * 3 / 10))"; }
read -r CDC_I CDC_U CDC_D < <(cdc_mix "$CDC_CHANGES")

# check_cdc JSON [N]: "ok" when the change rows in JSON are exactly the
# changes of N (default CDC_CHANGES) made by pg_cdc_changes or the
# MariaDB scenario: I inserts of ids 1..I, U updates of ids 1..U, D
# deletes of the last D ids (the ops are compared when JSON has them).
check_cdc() {
  local i u d
  read -r i u d < <(cdc_mix "${2:-$CDC_CHANGES}")
  python3 -c 'import json,sys
c=json.load(open(sys.argv[1])); i,u,d=map(int,sys.argv[2:5])
tri=lambda n: n*(n+1)//2
want={"count":i+u+d,"sum":tri(i)+tri(u)+tri(i)-tri(i-d),"min":1,"max":i}
bad=["%s %s != %s" % (k,c.get(k),v) for k,v in want.items() if c.get(k)!=v]
if "ops" in c:
    o={k:v for k,v in {"insert":i,"update":u,"delete":d}.items() if v}
    if c["ops"]!=o: bad.append("ops %s != %s" % (c["ops"],o))
if c.get("bad_lines"): bad.append("%d lines without an id" % c["bad_lines"])
print("ok" if not bad else "; ".join(bad))' "$1" "$i" "$u" "$d"
}

# pg_cdc_changes TABLE N: N changes (cdc_mix) on TABLE: inserts, then
# updates, then deletes, in transactions of up to 10,000 changes.
pg_cdc_changes() {
  local tb=$1 n=$2 f="$WORK/changes-$1.sql" a i u d
  read -r i u d < <(cdc_mix "$n")
  : >"$f"
  for ((a = 1; a <= i; a += 10000)); do
    echo "INSERT INTO $tb SELECT g, g % 1000, 'row ' || g, g / 3.0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', (g % 100000) / 100.0 FROM generate_series($a, $((a + 9999 < i ? a + 9999 : i))) g;" >>"$f"
  done
  for ((a = 1; a <= u; a += 10000)); do
    echo "UPDATE $tb SET a = a + 1, b = b || '!' WHERE id BETWEEN $a AND $((a + 9999 < u ? a + 9999 : u));" >>"$f"
  done
  for ((a = i - d + 1; a <= i; a += 10000)); do
    echo "DELETE FROM $tb WHERE id BETWEEN $a AND $((a + 9999 < i ? a + 9999 : i));" >>"$f"
  done
  bounded pg-cdc/changes "$n" "making $n changes in $tb" "${PSQL[@]}" "$OPENETL_TEST_POSTGRES_DSN" -f "$f"
}

# cdc_table TABLE PUB: an empty change table and its publication.
cdc_table() {
  pg "DROP TABLE IF EXISTS $1" 2>/dev/null
  pg "DROP PUBLICATION IF EXISTS $2" 2>/dev/null
  pg "CREATE TABLE $1 (id int8 PRIMARY KEY, a int4, b text, c float8, d timestamptz, e numeric(12,2))"
  pg "CREATE PUBLICATION $2 FOR TABLE $1"
}

# conduit_cdc_run RUN SETTING: Conduit's Postgres CDC (no snapshot) on
# the peer table, with its defaults or its performance advice, from a
# slot made before the PEER_CDC_CHANGES changes, into a JSON-lines file.
conduit_cdc_run() {
  local run=$1 set=$2 dir="$WORK/conduit-cdc-$2-$1" slot="cdc_conduit_$2_$1" extra=() batch="" label=defaults
  mkdir -p "$dir"
  if [ "$set" = advised ]; then
    extra=(--preview.pipeline-arch-v2)
    label="arch v2, batch 10000 (100 ms), no schema extraction"
    batch="
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms
          sdk.schema.extract.payload.enabled: 'false'
          sdk.schema.extract.key.enabled: 'false'
          logrepl.withAvroSchema: 'false'"
  fi
  cat >"$dir/pipeline.yaml" <<EOF
version: "2.2"
pipelines:
  - id: bench
    status: running
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: '$OPENETL_TEST_POSTGRES_DSN'
          tables: '${CDC_TABLE}_peer'
          snapshotMode: never
          cdcMode: logrepl
          logrepl.slotName: '$slot'
          logrepl.publicationName: '${CDC_PUB}_peer'$batch
      - id: file
        type: destination
        plugin: builtin:file
        settings:
          path: '$dir/out.jsonl'${batch:+
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms}
EOF
  conduit_follow pg-cdc "$label" "$run" "$dir" '"key":' "$PEER_CDC_CHANGES" cdc "${extra[@]}"
  sleep 1
  drop_slot "$slot"
}

scenario_pg_cdc() {
  pin postgres "$DB_CPU"
  local r
  cdc_table "$CDC_TABLE" "$CDC_PUB"
  # One slot per run and tool, all made before the changes, so each
  # drains the same WAL once.
  for ((r = 1; r <= RUNS; r++)); do
    rm -rf "$WORK/cdc-$r"
    "$BIN" pg-cdc -table "$CDC_TABLE" -pub "$CDC_PUB" -slot "cdc_openetl_$r" -out "$WORK/cdc-$r" >/dev/null
    pg "SELECT pg_create_logical_replication_slot('cdc_recv_$r', 'pgoutput')" >/dev/null
    pg "SELECT pg_create_logical_replication_slot('cdc_bare_$r', 'pgoutput')" >/dev/null
  done
  log "making $CDC_CHANGES changes"
  pg_cdc_changes "$CDC_TABLE" "$CDC_CHANGES"
  local end
  end=$(pg "SELECT pg_current_wal_lsn()")
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "pg-cdc run $r" || break
    log "pg-cdc run $r of $RUNS"
    local d="$WORK/recv-$r" ok=FAIL detail secs=0 cpu=0 rss=0 lim rc=0
    mkdir -p "$d"
    lim=$(step_limit pg-cdc/ceiling "$CDC_CHANGES")
    timed "$d/time" "$TOOL_CPU" "$lim" pg_recvlogical -d "$OPENETL_TEST_POSTGRES_DSN" -S "cdc_recv_$r" --start \
      -E "$end" -o proto_version=2 -o streaming=on -o "publication_names=$CDC_PUB" -f /dev/null --no-loop >"$d/log" 2>&1 || rc=$?
    if ((rc == 0)); then
      read -r secs u s m < <(tail -1 "$d/time")
      cpu=$(python3 -c "print($u + $s)") rss=$(python3 -c "print($m / 1024)")
      ok=ok detail="reached the end LSN (pg_recvlogical counts no rows)"
    elif ((rc == 124 || rc == 137)); then
      detail="over its step budget of $lim s (killed)" OVER=1
    else
      detail="pg_recvlogical failed: $(tail -1 "$d/log")"
    fi
    result pg-cdc ceiling "pg_recvlogical, pgoutput v2, streaming → /dev/null" "$r" "$CDC_CHANGES" "$secs" "$cpu" "$rss" "$ok" "$detail"
    drop_slot "cdc_recv_$r"
    driver pg-cdc ceiling "bare pglogrepl loop, pgoutput v2, streaming, parse + ids" "$r" cdc "$TOOL_CPU" \
      pg-cdc-ceiling -slot "cdc_bare_$r" -pub "$CDC_PUB" -to "$end" -n "$CDC_CHANGES"
    drop_slot "cdc_bare_$r"
    driver pg-cdc openetl "Parquet zstd, defaults" "$r" cdc "$TOOL_CPU" \
      pg-cdc -table "$CDC_TABLE" -pub "$CDC_PUB" -slot "cdc_openetl_$r" -out "$WORK/cdc-$r"
    drop_slot "cdc_openetl_$r"
    rm -rf "$WORK/cdc-$r"
  done
  # Slots of runs not made (over budget) would keep the WAL.
  pg "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'cdc\_%' AND NOT active" >/dev/null || true
  if [ -z "$CONDUIT" ] || ! in_budget "pg-cdc Conduit runs"; then
    return 0
  fi
  # Conduit, on a table of its own with PEER_CDC_CHANGES changes, made
  # once the runs above dropped their slots (so they decode none of it).
  cdc_table "${CDC_TABLE}_peer" "${CDC_PUB}_peer"
  for ((r = 1; r <= PEER_RUNS; r++)); do
    pg "SELECT pg_create_logical_replication_slot('cdc_conduit_defaults_$r', 'pgoutput')" >/dev/null
    pg "SELECT pg_create_logical_replication_slot('cdc_conduit_advised_$r', 'pgoutput')" >/dev/null
  done
  log "making $PEER_CDC_CHANGES changes for Conduit"
  pg_cdc_changes "${CDC_TABLE}_peer" "$PEER_CDC_CHANGES"
  for ((r = 1; r <= PEER_RUNS; r++)); do
    in_budget "pg-cdc Conduit run $r" || break
    conduit_cdc_run "$r" defaults
    conduit_cdc_run "$r" advised
  done
  pg "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'cdc\_%' AND NOT active" >/dev/null || true
}

# ------------------------------------------------------------ mariadb-cdc

# my_client: the mariadb client command for the database of
# OPENETL_TEST_MARIADB_DSN, in the array MY.
my_client() {
  local d=$OPENETL_TEST_MARIADB_DSN user rest
  user=${d%%@*} rest=${d#*@}
  local hp=${rest%%/*}
  MY=(mariadb --protocol=tcp -h "${hp%%:*}" -P "${hp##*:}" -u "${user%%:*}" -p"${user#*:}" -N -B "${rest#*/}")
}

# my SQL: runs SQL on the MariaDB database of OPENETL_TEST_MARIADB_DSN.
my() {
  my_client
  "${MY[@]}" -e "$1"
}

# The same mix as pg-cdc (CDC_I inserts, CDC_U updates, CDC_D deletes) on
# a MariaDB table, waiting in the binlog; each run's pipeline noted its
# start position before the changes, the ceiling and canal are given it.
scenario_mariadb_cdc() {
  pin mariadb "$DB_CPU"
  local r t=bench_cdc
  my "DROP TABLE IF EXISTS $t; CREATE TABLE $t (id bigint PRIMARY KEY, a int, b varchar(40), c decimal(12,2), d datetime(6), e double)"
  for ((r = 1; r <= RUNS; r++)); do
    rm -rf "$WORK/mcdc-$r"
    "$BIN" mysql-cdc -table "$t" -out "$WORK/mcdc-$r" >/dev/null
  done
  local start end a f="$WORK/mchanges.sql"
  start=$(my "SHOW MASTER STATUS" | awk '{print $1 ":" $2}')
  log "making $CDC_CHANGES changes in MariaDB"
  : >"$f"
  for ((a = 1; a <= CDC_I; a += 10000)); do
    echo "INSERT INTO $t SELECT seq, seq % 1000, concat('customer ', seq), seq / 100, '2024-01-02 03:04:05.123456' + INTERVAL seq SECOND, seq / 7 FROM seq_${a}_to_$((a + 9999 < CDC_I ? a + 9999 : CDC_I));" >>"$f"
  done
  for ((a = 1; a <= CDC_U; a += 10000)); do
    echo "UPDATE $t SET a = a + 1, b = concat(b, '+') WHERE id BETWEEN $a AND $((a + 9999 < CDC_U ? a + 9999 : CDC_U));" >>"$f"
  done
  for ((a = CDC_I - CDC_D + 1; a <= CDC_I; a += 10000)); do
    echo "DELETE FROM $t WHERE id BETWEEN $a AND $((a + 9999 < CDC_I ? a + 9999 : CDC_I));" >>"$f"
  done
  my_client
  bounded mariadb-cdc/changes "$CDC_CHANGES" "making $CDC_CHANGES changes in MariaDB" "${MY[@]}" -e "source $f"
  end=$(my "SHOW MASTER STATUS" | awk '{print $1 ":" $2}')
  local canal_bin=""
  if peer canal; then
    canal_bin=$(build_canal) || note "go-mysql canal (bench/mysqlcanal): build failed ($(tail -1 "$BENCH_DIR/logs/build-canal.log"))"
  fi
  local d=$OPENETL_TEST_MARIADB_DSN user rest
  user=${d%%@*} rest=${d#*@}
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "mariadb-cdc run $r" || break
    log "mariadb-cdc run $r of $RUNS"
    driver mariadb-cdc ceiling "bare BinlogSyncer decode loop" "$r" "$CDC_CHANGES" "$TOOL_CPU" \
      mysql-ceiling -from "$start" -to "$end"
    driver mariadb-cdc openetl "Parquet zstd, defaults" "$r" cdc "$TOOL_CPU" \
      mysql-cdc -table "$t" -out "$WORK/mcdc-$r"
    rm -rf "$WORK/mcdc-$r"
    if [ -n "$canal_bin" ] && ((r <= PEER_RUNS)); then
      local o="$WORK/canal-$r.json" ok=FAIL detail rows=0 secs=0 cpu=0 rss=0 lim
      lim=$(step_limit mariadb-cdc/canal "$CDC_CHANGES")
      if timed "$o.time" "$TOOL_CPU" "$lim" "$canal_bin" -addr "${rest%%/*}" -user "${user%%:*}" -password "${user#*:}" \
        -table "${rest#*/}.$t" -from "$start" -to "$end" -want "$CDC_CHANGES" >"$o" 2>"$o.err"; then
        rows=$(jget "$o" changes) secs=$(jget "$o" seconds) cpu=$(jget "$o" cpu_seconds)
        read -r _ _ _ m < <(tail -1 "$o.time")
        rss=$(python3 -c "print($m / 1024)")
        if [ "$rows" = "$CDC_CHANGES" ]; then ok=ok detail=ok; else detail="changes $rows != $CDC_CHANGES"; fi
      else
        detail="mysqlcanal failed or went over its step budget of $lim s: $(tail -1 "$o.err" | cut -c1-200)"
      fi
      result mariadb-cdc canal "go-mysql v1.16.0 canal, no-op handler" "$r" "$rows" "$secs" "$cpu" "$rss" "$ok" "$detail"
    fi
  done
}

# ------------------------------------------------------------ kafka

scenario_kafka_kfake() {
  # One kfake cluster, in a process of its own on the database CPU,
  # filled once and read by every run (the tool on its own CPU, as
  # against the real broker).
  local addr="$WORK/kfake.addr" r brokers kpid t0=$SECONDS lim
  rm -f "$addr"
  log "filling kfake with $KFAKE_MSGS messages"
  lim=$(step_limit kafka-kfake/produce "$KFAKE_MSGS")
  taskset -c "$DB_CPU" "$BIN" kfake-serve -n "$KFAKE_MSGS" -topic bench -addr-file "$addr" </dev/null >"$WORK/kfake.json" 2>"$WORK/kfake.err" &
  kpid=$!
  PEER_PIDS+=("$kpid")
  until [ -s "$addr" ]; do
    if ! kill -0 "$kpid" 2>/dev/null || ((SECONDS - t0 > lim)); then
      note "kafka-kfake not run: kfake did not fill in $lim s ($(tail -1 "$WORK/kfake.err"))"
      kill "$kpid" 2>/dev/null || true
      wait "$kpid" 2>/dev/null || true
      return 0
    fi
    sleep 0.5
  done
  brokers=$(cat "$addr")
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "kafka-kfake run $r" || break
    log "kafka-kfake run $r of $RUNS"
    driver kafka-kfake ceiling "franz-go fetch → discard" "$r" "$KFAKE_MSGS" "$TOOL_CPU" \
      kafka-ceiling -brokers "$brokers" -topic bench -n "$KFAKE_MSGS"
    rm -rf "$WORK/kafka-out"
    driver kafka-kfake openetl "Parquet zstd, defaults" "$r" "$KFAKE_MSGS" "$TOOL_CPU" \
      kafka -brokers "$brokers" -topic bench -out "$WORK/kafka-out"
    rm -rf "$WORK/kafka-out"
  done
  kill "$kpid" 2>/dev/null || true
  wait "$kpid" 2>/dev/null || true
}

# conduit_kafka_run RUN TOPIC: Conduit kafka → file, with its performance
# advice, on the PEER_KAFKA_MSGS topic; the file destination writes each
# message's value as it is (the template record format), so the follower
# finds the ids.
conduit_kafka_run() {
  local run=$1 topic=$2 dir="$WORK/conduit-kafka-$1"
  mkdir -p "$dir"
  cat >"$dir/pipeline.yaml" <<EOF
version: "2.2"
pipelines:
  - id: bench
    status: running
    connectors:
      - id: kafka
        type: source
        plugin: builtin:kafka
        settings:
          servers: '$OPENETL_TEST_KAFKA_BROKERS'
          topics: '$topic'
          readFromBeginning: 'true'
          groupID: 'conduit-bench-$run-$$'
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms
          sdk.schema.extract.payload.enabled: 'false'
          sdk.schema.extract.key.enabled: 'false'
      - id: file
        type: destination
        plugin: builtin:file
        settings:
          path: '$dir/out.jsonl'
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms
          sdk.record.format: template
          sdk.record.format.options: '{{ printf "%s" .Payload.After }}'
EOF
  conduit_follow kafka-broker "arch v2, batch 10000 (100 ms), no schema extraction" "$run" "$dir" '' \
    "$PEER_KAFKA_MSGS" ids --preview.pipeline-arch-v2
}

scenario_kafka_broker() {
  pin kafka "$DB_CPU"
  local topic="bench_$KAFKA_MSGS" r
  log "producing $KAFKA_MSGS messages to the broker"
  bounded kafka-broker/produce "$KAFKA_MSGS" "producing $KAFKA_MSGS messages" \
    "$BIN" kafka-produce -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$KAFKA_MSGS" >/dev/null
  KAFKA_TOPIC=$topic
  local ptopic="bench_$PEER_KAFKA_MSGS"
  if peer conduit && [ "$ptopic" != "$topic" ]; then
    bounded kafka-broker/produce "$PEER_KAFKA_MSGS" "producing $PEER_KAFKA_MSGS messages" \
      "$BIN" kafka-produce -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$ptopic" -n "$PEER_KAFKA_MSGS" >/dev/null
  fi
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "kafka-broker run $r" || break
    log "kafka-broker run $r of $RUNS"
    driver kafka-broker ceiling "franz-go fetch → discard" "$r" "$KAFKA_MSGS" "$TOOL_CPU" \
      kafka-ceiling -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$KAFKA_MSGS"
    rm -rf "$WORK/kafka-out"
    driver kafka-broker openetl "Parquet zstd, defaults" "$r" "$KAFKA_MSGS" "$TOOL_CPU" \
      kafka -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -out "$WORK/kafka-out"
    rm -rf "$WORK/kafka-out"
    if [ -n "$CONDUIT" ] && ((r <= PEER_RUNS)); then
      conduit_kafka_run "$r" "$ptopic"
    fi
  done
}

# kafka-avro: the Kafka scenario's messages with their values in Avro
# (the same nine fields and values, ts as timestamp-micros, ~130 bytes),
# framed for the registry that holds their schema, on the broker; read
# with kafka.DecodeRegistry. The ceiling fetches and discards the same
# topic.
scenario_kafka_avro() {
  pin kafka "$DB_CPU"
  pin registry "$DB_CPU"
  local topic="bench_avro_$AVRO_MSGS" r
  log "producing $AVRO_MSGS Avro messages to the broker"
  bounded kafka-avro/produce "$AVRO_MSGS" "producing $AVRO_MSGS Avro messages" \
    "$BIN" kafka-produce -brokers "$OPENETL_TEST_KAFKA_BROKERS" -registry "$OPENETL_TEST_REGISTRY" \
    -topic "$topic" -n "$AVRO_MSGS" >/dev/null
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "kafka-avro run $r" || break
    log "kafka-avro run $r of $RUNS"
    driver kafka-avro ceiling "franz-go fetch → discard" "$r" "$AVRO_MSGS" "$TOOL_CPU" \
      kafka-ceiling -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$AVRO_MSGS"
    rm -rf "$WORK/kafka-out"
    driver kafka-avro openetl "Parquet zstd, DecodeRegistry" "$r" "$AVRO_MSGS" "$TOOL_CPU" \
      kafka -brokers "$OPENETL_TEST_KAFKA_BROKERS" -registry "$OPENETL_TEST_REGISTRY" -topic "$topic" -out "$WORK/kafka-out"
    rm -rf "$WORK/kafka-out"
  done
}

# ndjson: the Kafka scenario's messages as an NDJSON file, parsed by
# Benthos (content().parse_json()) and written back as JSON lines.
scenario_ndjson() {
  local in="$WORK/messages.ndjson" r
  await_peers
  if [ -z "$BENTHOS" ]; then
    return 0
  fi
  bounded ndjson/produce "$PEER_KAFKA_MSGS" "writing $PEER_KAFKA_MSGS NDJSON messages" \
    "$BIN" kafka-produce -n "$PEER_KAFKA_MSGS" -ndjson "$in" >/dev/null
  for ((r = 1; r <= PEER_RUNS; r++)); do
    in_budget "ndjson run $r" || break
    log "ndjson run $r of $PEER_RUNS"
    local dir="$WORK/benthos-$r"
    mkdir -p "$dir"
    cat >"$dir/config.yaml" <<EOF
http:
  enabled: false
logger:
  level: warn
input:
  file:
    paths: ['$in']
    scanner:
      lines:
        max_buffer_size: 1000000
pipeline:
  processors:
    - mapping: root = content().parse_json()
output:
  file:
    path: '$dir/out.jsonl'
    codec: lines
EOF
    local ok=FAIL detail rows=0 secs=0 cpu=0 rss=0 lim
    lim=$(step_limit ndjson/benthos "$PEER_KAFKA_MSGS")
    if timed "$dir/time" "$ALL_CPUS" "$lim" "$BENTHOS" -c "$dir/config.yaml" >"$dir/log" 2>&1; then
      read -r secs u s m < <(tail -1 "$dir/time")
      cpu=$(python3 -c "print($u + $s)") rss=$(python3 -c "print($m / 1024)")
      "$BIN" check-jsonl -file "$dir/out.jsonl" -n "$PEER_KAFKA_MSGS" >"$dir/check.json"
      rows=$(jget "$dir/check.json" rows)
      python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["check"]))' "$dir/check.json" >"$dir/ids.json"
      detail=$(check_ids "$dir/ids.json" "$PEER_KAFKA_MSGS")
      [ "$detail" = ok ] && ok=ok
    else
      detail="benthos failed or went over its step budget of $lim s: $(tail -1 "$dir/log" | cut -c1-200)"
    fi
    result ndjson benthos "file → parse_json → file, defaults" "$r" "$rows" "$secs" "$cpu" "$rss" "$ok" "$detail"
    rm -f "$dir/out.jsonl"
  done
}

# ------------------------------------------------------------ arrow-parquet

# The Parquet destination's writer against pqarrow's FileWriter alone,
# from identical Arrow batches (10 columns, 8,192 rows each).
scenario_arrow_parquet() {
  local r
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "arrow-parquet run $r" || break
    log "arrow-parquet run $r of $RUNS"
    rm -rf "$WORK/arrow-out"
    driver arrow-parquet ceiling "pqarrow FileWriter → file" "$r" "$ARROW_ROWS" "$ALL_CPUS" \
      arrow-parquet -plain -n "$ARROW_ROWS" -out "$WORK/arrow-out"
    rm -rf "$WORK/arrow-out"
    driver arrow-parquet openetl "sink/parquet Write+PreCommit+Commit" "$r" "$ARROW_ROWS" "$ALL_CPUS" \
      arrow-parquet -n "$ARROW_ROWS" -out "$WORK/arrow-out"
    rm -rf "$WORK/arrow-out"
  done
}

# ------------------------------------------------------------ arrow-clickhouse

# ch_check JSON N: "ok" when the server's InsertedRows counter rose by
# exactly N during the timed section (a Null table keeps nothing to read
# back, but the server counts every row an INSERT handed it).
ch_check() {
  local got
  got=$(jget "$1" server inserted_rows)
  if [ "$got" = "$2" ]; then echo ok; else echo "server InsertedRows +$got != $2"; fi
}

# ch_read JSON N: the MergeTree run's table read back with
# clickhouse-client: count, distinct ids, min, max and sum, checked
# against 1..N.
ch_read() {
  local table
  table=$(jget "$1" server table)
  clickhouse-client --host 127.0.0.1 --port "${OPENETL_TEST_CLICKHOUSE_ADDR##*:}" --format JSONEachRow \
    -q "SELECT count() AS count, uniqExact(id) AS distinct, min(id) AS min, max(id) AS max, sum(id) AS sum FROM $table" |
    python3 -c 'import json,sys; print(json.dumps({k: int(v) for k, v in json.loads(sys.stdin.read()).items()}))' >"$1.read"
  check_ids "$1.read" "$2"
}

# ch_driver SCENARIO TOOL SETTING RUN CHECK ARGS...: one arrow-clickhouse
# run (driver's limits and figures), checked by CHECK (ch_check or
# ch_read); the server's CPU per million rows goes to chserver.tsv.
ch_driver() {
  local sc=$1 tool=$2 set=$3 run=$4 check=$5 out="$WORK/$1-$2-$4.json" ok detail rc=0 lim
  shift 5
  lim=$(step_limit "$sc/$tool" "$ARROW_ROWS")
  timeout -k 10 "$lim" taskset -c "$TOOL_CPU" "$BIN" arrow-clickhouse -n "$ARROW_ROWS" "$@" >"$out" 2>"$out.err" || rc=$?
  if ((rc == 124 || rc == 137)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "over its step budget of $lim s (killed)"
    OVER=1
    return 0
  elif ((rc != 0)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "$(tail -1 "$out.err")"
    return 0
  fi
  detail=$("$check" "$out" "$ARROW_ROWS") ok=FAIL
  [ "$detail" = ok ] && ok=ok
  result "$sc" "$tool" "$set" "$run" "$(jget "$out" rows)" "$(jget "$out" seconds)" \
    "$(jget "$out" cpu_seconds)" "$(jget "$out" peak_rss_mb)" "$ok" "$detail"
  printf '%s\t%s\t%s\n' "$sc" "$tool" "$(python3 -c "print($(jget "$out" server cpu_seconds) / $ARROW_ROWS * 1e6)")" >>"$WORK/chserver.tsv"
}

# The ClickHouse destination's writer against clickhouse-go's columnar
# batch insert alone, from identical Arrow batches (13 columns, metadata
# included, 8,192 rows each; 100,000-row blocks): RUNS times into
# Engine=Null tables (client, protocol and the server's parsing; checked
# by the server's row counter), then once into MergeTree tables (the
# writer's whole Write+PreCommit+Commit path; read back with
# clickhouse-client).
scenario_arrow_clickhouse() {
  pin clickhouse "$DB_CPU"
  local r
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "arrow-clickhouse run $r" || break
    log "arrow-clickhouse run $r of $RUNS"
    ch_driver arrow-clickhouse ceiling "clickhouse-go batch insert → Null table" "$r" ch_check -plain
    ch_driver arrow-clickhouse openetl "sink/clickhouse Write+PreCommit → Null staging table" "$r" ch_check
  done
  in_budget "arrow-clickhouse MergeTree run" || return 0
  log "arrow-clickhouse MergeTree run"
  ch_driver arrow-clickhouse-mt ceiling "clickhouse-go batch insert → MergeTree" 1 ch_read -plain -store
  ch_driver arrow-clickhouse-mt openetl "sink/clickhouse Write+PreCommit+Commit → MergeTree (staged, then copied)" 1 ch_read -store
}

# ------------------------------------------------------------ kafka-clickhouse

# kch_driver TOOL SETTING RUN ARGS...: one kafka-clickhouse run (driver's
# limits and figures), its table read back by ch_read; the server's CPU
# per million rows goes to chserver.tsv.
kch_driver() {
  local sc=kafka-clickhouse tool=$1 set=$2 run=$3 out="$WORK/kafka-clickhouse-$1-$3.json" ok detail rc=0 lim
  shift 3
  lim=$(step_limit "$sc/$tool" "$CH_KAFKA_MSGS")
  await_peers
  timeout -k 10 "$lim" taskset -c "$TOOL_CPU" "$BIN" kafka-clickhouse -brokers "$OPENETL_TEST_KAFKA_BROKERS" \
    -n "$CH_KAFKA_MSGS" "$@" >"$out" 2>"$out.err" || rc=$?
  if ((rc == 124 || rc == 137)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "over its step budget of $lim s (killed)"
    OVER=1
    return 0
  elif ((rc != 0)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "$(tail -1 "$out.err")"
    return 0
  fi
  detail=$(ch_read "$out" "$CH_KAFKA_MSGS") ok=FAIL
  [ "$detail" = ok ] && ok=ok
  result "$sc" "$tool" "$set" "$run" "$(jget "$out" rows)" "$(jget "$out" seconds)" \
    "$(jget "$out" cpu_seconds)" "$(jget "$out" peak_rss_mb)" "$ok" "$detail"
  printf '%s\t%s\t%s\n' "$sc" "$tool" "$(python3 -c "print($(jget "$out" server cpu_seconds) / $CH_KAFKA_MSGS * 1e6)")" >>"$WORK/chserver.tsv"
}

# Kafka → ClickHouse end to end (issue #29): CH_KAFKA_MSGS of
# kafka-broker's JSON messages (its topic when that scenario ran at the
# same size, else one produced here) into a
# MergeTree table through the pipeline (source/kafka, DecodeJSON →
# sink/clickhouse, defaults, one Sync with its checkpoints), against the
# baseline: a franz-go fetch of the same topic, encoding/json into a
# struct, clickhouse-go's batch insert in 100k-row blocks. The broker
# and ClickHouse share CPU $DB_CPU, the tool has CPU $TOOL_CPU; every
# run's table is read back with clickhouse-client (ids 1..N).
KAFKA_TOPIC=
scenario_kafka_clickhouse() {
  pin kafka "$DB_CPU"
  pin clickhouse "$DB_CPU"
  local topic="bench_$CH_KAFKA_MSGS" r
  if [ "$KAFKA_TOPIC" != "$topic" ]; then
    log "producing $CH_KAFKA_MSGS messages to the broker"
    bounded kafka-broker/produce "$CH_KAFKA_MSGS" "producing $CH_KAFKA_MSGS messages" \
      "$BIN" kafka-produce -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$CH_KAFKA_MSGS" >/dev/null
    KAFKA_TOPIC=$topic
  fi
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "kafka-clickhouse run $r" || break
    log "kafka-clickhouse run $r of $RUNS"
    kch_driver ceiling "franz-go fetch, encoding/json, clickhouse-go batch insert → MergeTree" "$r" -topic "$topic" -plain
    rm -rf "$WORK/kch-out"
    kch_driver openetl "source/kafka → sink/clickhouse, defaults (staged, then copied)" "$r" -topic "$topic" -out "$WORK/kch-out"
    rm -rf "$WORK/kch-out"
  done
}

# chc_read JSON N: a cluster run's table read back with clickhouse-client
# through remote() over each shard's first replica (the one written):
# count, distinct ids, min, max and sum over all shards, against 1..N.
chc_read() {
  local table shards
  table=$(jget "$1" server table) shards=$(jget "$1" note)
  local first=${shards%%,*}
  clickhouse-client --host 127.0.0.1 --port "${first##*:}" --format JSONEachRow \
    -q "SELECT count() AS count, uniqExact(id) AS distinct, min(id) AS min, max(id) AS max, sum(id) AS sum FROM remote('$shards', ${table%%.*}, ${table#*.})" |
    python3 -c 'import json,sys; print(json.dumps({k: int(v) for k, v in json.loads(sys.stdin.read()).items()}))' >"$1.read"
  check_ids "$1.read" "$2"
}

# Kafka → ClickHouse cluster (issue #29): kafka-clickhouse's messages
# through the pipeline into scripts/servers.sh's chcluster (Config.Cluster:
# ReplicatedMergeTree tables, rows routed to shards by _openetl_id, each
# shard written through its first replica) with its first shard only and
# with both; the five server processes (four ClickHouse, ZooKeeper) on
# CPU $DB_CPU with the broker, the tool on CPU $TOOL_CPU; each run into a
# fresh database, read back by chc_read. No baseline: a plain insert has
# no routing or replication to compare with.
scenario_kafka_chcluster() {
  pin kafka "$DB_CPU"
  pin chcluster "$DB_CPU"
  local topic="bench_$CH_KAFKA_MSGS" r ns out lim rc detail ok
  if [ "$KAFKA_TOPIC" != "$topic" ]; then
    log "producing $CH_KAFKA_MSGS messages to the broker"
    bounded kafka-broker/produce "$CH_KAFKA_MSGS" "producing $CH_KAFKA_MSGS messages" \
      "$BIN" kafka-produce -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$CH_KAFKA_MSGS" >/dev/null
    KAFKA_TOPIC=$topic
  fi
  for ((r = 1; r <= RUNS; r++)); do
    for ns in 1 2; do
      in_budget "kafka-chcluster run $r ($ns shards)" || return 0
      log "kafka-chcluster run $r of $RUNS, $ns shard(s)"
      out="$WORK/kafka-chcluster-$ns-$r.json" rc=0
      lim=$(step_limit kafka-chcluster/openetl "$CH_KAFKA_MSGS")
      rm -rf "$WORK/kch-out"
      timeout -k 10 "$lim" taskset -c "$TOOL_CPU" "$BIN" kafka-clickhouse -brokers "$OPENETL_TEST_KAFKA_BROKERS" \
        -n "$CH_KAFKA_MSGS" -topic "$topic" -out "$WORK/kch-out" -shards "$OPENETL_TEST_CHCLUSTER_SHARDS" -nshards "$ns" \
        >"$out" 2>"$out.err" || rc=$?
      rm -rf "$WORK/kch-out"
      local set="source/kafka → sink/clickhouse Config.Cluster, $ns shard(s) × 2 replicas"
      if ((rc == 124 || rc == 137)); then
        result kafka-chcluster openetl "$set" "$r" 0 0 0 0 FAIL "over its step budget of $lim s (killed)"
        OVER=1
        continue
      elif ((rc != 0)); then
        result kafka-chcluster openetl "$set" "$r" 0 0 0 0 FAIL "$(tail -1 "$out.err")"
        continue
      fi
      detail=$(chc_read "$out" "$CH_KAFKA_MSGS") ok=FAIL
      [ "$detail" = ok ] && ok=ok
      result kafka-chcluster openetl "$set" "$r" "$(jget "$out" rows)" "$(jget "$out" seconds)" \
        "$(jget "$out" cpu_seconds)" "$(jget "$out" peak_rss_mb)" "$ok" "$detail"
    done
  done
}

# ------------------------------------------------------------ arrow-postgres

# pg_read JSON N: the run's table read back with psql (count, distinct
# ids, min, max and sum), checked against 1..N.
pg_read() {
  local table
  table=$(jget "$1" server table)
  pg "SELECT json_build_object('count', count(*), 'distinct', count(DISTINCT id), 'min', min(id), 'max', max(id), 'sum', sum(id)) FROM $table" >"$1.read"
  check_ids "$1.read" "$2"
}

# pg_driver TOOL LEG SETTING RUN ARGS...: one arrow-postgres run (driver's
# limits and figures), read back by pg_read; the server's CPU per
# million rows goes to pgserver.tsv under LEG.
pg_driver() {
  local sc=arrow-postgres tool=$1 leg=$2 set=$3 run=$4 out="$WORK/arrow-postgres-$2-$4.json" ok detail rc=0 lim
  shift 4
  lim=$(step_limit "$sc/$tool" "$ARROW_PG_ROWS")
  await_peers
  timeout -k 10 "$lim" taskset -c "$TOOL_CPU" "$BIN" arrow-postgres -n "$ARROW_PG_ROWS" "$@" >"$out" 2>"$out.err" || rc=$?
  if ((rc == 124 || rc == 137)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "over its step budget of $lim s (killed)"
    OVER=1
    return 0
  elif ((rc != 0)); then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "$(tail -1 "$out.err")"
    return 0
  fi
  detail=$(pg_read "$out" "$ARROW_PG_ROWS") ok=FAIL
  [ "$detail" = ok ] && ok=ok
  result "$sc" "$tool" "$set" "$run" "$(jget "$out" rows)" "$(jget "$out" seconds)" \
    "$(jget "$out" cpu_seconds)" "$(jget "$out" peak_rss_mb)" "$ok" "$detail"
  printf '%s\t%s\n' "$leg" "$(python3 -c "print($(jget "$out" server cpu_seconds) / $ARROW_PG_ROWS * 1e6)")" >>"$WORK/pgserver.tsv"
}

# The Postgres destination's writer (Write, PreCommit and Commit of
# 100k-row epochs, each committed before the next is written: its whole
# path, no overlap) against a bare pgx CopyFrom of the same Arrow rows
# (handed to pgx as Go values) into a logged table of the same types:
# 14 columns, metadata included, 10k-row batches, appended and merged by
# id, each run into a fresh schema and read back with psql.
scenario_arrow_postgres() {
  pin postgres "$DB_CPU"
  local r
  : >"$WORK/pgserver.tsv"
  for ((r = 1; r <= RUNS; r++)); do
    in_budget "arrow-postgres run $r" || break
    log "arrow-postgres run $r of $RUNS"
    pg_driver ceiling copy "pgx CopyFrom → logged table" "$r" -plain
    pg_driver openetl append "sink/postgres Write+PreCommit+Commit, append (staged, then INSERT ... SELECT)" "$r" -mode append
    pg_driver openetl merge "sink/postgres Write+PreCommit+Commit, merge by id (staged, then MERGE)" "$r" -mode merge
  done
}

# ------------------------------------------------------------ run

T_SCEN=$SECONDS
for sc in pg-snapshot pg-cdc mariadb-cdc kafka-kfake kafka-broker kafka-avro ndjson arrow-parquet arrow-clickhouse kafka-clickhouse kafka-chcluster arrow-postgres; do
  if has "$sc"; then run_scenario "$sc" "scenario_${sc//-/_}"; fi
done

await_peers # when no timed step ran
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
# The load and the commit are in the log and results.tsv, not in the
# Markdown (BENCHMARKS.md keeps reference figures, not a run's state).
log "built from $BUILT_FROM; load average (1, 5, 15 min) $LOAD_START at the start, $LOAD_END at the end"

# ------------------------------------------------------------ report

versions() {
  echo "- Go: $(go version | cut -d' ' -f3)$([ -z "$BUILT_DIRTY" ] || echo "; OpenETL with uncommitted changes to $BUILT_DIRTY")"
  if [ -n "${OPENETL_TEST_POSTGRES_DSN:-}" ]; then
    echo "- PostgreSQL: $(pg 'SHOW server_version') (scripts/servers.sh: fsync=off, wal_level=logical)"
  fi
  has mariadb-cdc && echo "- MariaDB: $(my 'SELECT VERSION()') (scripts/services/mariadb.sh, binlog_format=ROW, full images)"
  { has kafka-broker || has kafka-avro || has kafka-clickhouse || has kafka-chcluster; } && echo "- Kafka: Apache Kafka $(sed -n 's/^KAFKA_VERSION=//p' scripts/servers.sh) (KRaft, one broker, JVM -Xmx512m)"
  has kafka-avro && echo "- Registry: Apicurio Registry $(sed -n 's/^REGISTRY_VERSION=//p' scripts/services/registry.sh) (scripts/services/registry.sh, in-memory storage; the Confluent-compatible API), pinned with the broker"
  has kafka-kfake && echo "- kfake: franz-go's fake cluster, in a process of its own (openetl-bench kfake-serve) on CPU $DB_CPU, filled once for all runs"
  [ -n "$CONDUIT" ] && echo "- Conduit $CONDUIT_VERSION (built from source by bench/peers.sh, with $(go version -m "$CONDUIT" | awk '$1=="dep" && $2 ~ /conduit-connector-(postgres|file|kafka)$/ {sub(/.*\//, "", $2); printf "%s%s %s", n++ ? ", " : "", $2, $3}'); records written as JSON lines by its file destination)"
  [ -n "$BENTHOS" ] && echo "- Benthos core $BENTHOS_VERSION (built from source by bench/peers.sh)"
  { has arrow-clickhouse || has kafka-clickhouse; } && echo "- ClickHouse: $(clickhouse-client --host 127.0.0.1 --port "${OPENETL_TEST_CLICKHOUSE_ADDR##*:}" -q 'SELECT version()') (scripts/services/clickhouse.sh; clickhouse-go $(go list -m -f '{{.Version}}' github.com/ClickHouse/clickhouse-go/v2), native protocol)"
  has kafka-chcluster && echo "- ClickHouse cluster: scripts/services/chcluster.sh, four Debian ClickHouse 18.16 servers (2 shards × 2 replicas) and Debian's ZooKeeper, all on CPU $DB_CPU with the broker"
  true
}

machine() {
  local model mem
  model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
  mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
  echo "- Machine: $model, $(nproc) CPUs, $mem, $(uname -sr)"
}

SIZES="$PG_ROWS Postgres rows, $CDC_CHANGES changes (Postgres and MariaDB), $KAFKA_MSGS Kafka messages of ~200 bytes ($CH_KAFKA_MSGS into ClickHouse; $KFAKE_MSGS on kfake; $AVRO_MSGS in Avro, ~130 bytes), $ARROW_ROWS Arrow rows ($ARROW_PG_ROWS into Postgres)"
PEER_SIZES="Conduit: $PEER_PG_ROWS rows (snapshot), $PEER_CDC_CHANGES changes, $PEER_KAFKA_MSGS messages; Benthos: $PEER_KAFKA_MSGS messages; canal: $CDC_CHANGES changes"
{
  echo "<!-- bench-compare:start -->"
  echo "## Side by side (scripts/bench-compare.sh)"
  echo
  echo "Written by \`RUNS=$RUNS PEER_RUNS=$PEER_RUNS ROWS=$ROWS scripts/bench-compare.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC') in $(((SECONDS - T_START) / 60)) min"
  echo "(budget $BUDGET_MIN min, estimated $(((EST_TOTAL + 59) / 60))${OVER:+; OVER BUDGET: a step was killed or runs were not made, see the FAIL rows and notes}): $RUNS run(s) per tool and ceiling, $PEER_RUNS per peer."
  echo "Sizes: $SIZES; peers: $PEER_SIZES (a peer row at another size says so: rows/s and CPU-s per million rows compare, totals don't)."
  echo "Median, with min–max over the runs;"
  echo "CPU is the tool's user+sys CPU per million rows (OpenETL and ceilings: getrusage of the timed section;"
  echo "peers: /usr/bin/time of the whole process), peak RSS is VmHWM / max RSS. Every run's output is checked"
  echo "against the source (count, distinct ids, min, max, sum over ids 1..N; change kinds for CDC); a run that fails is marked FAIL"
  echo "and left out of the figures. With a server, the server is pinned to CPU $DB_CPU and the tool to CPU $TOOL_CPU;"
  echo "without one (ndjson, Arrow → Parquet) the tool gets CPUs $ALL_CPUS; kfake, like the broker, gets CPU $DB_CPU. \"vs ceiling\" is against the scenario's fastest ceiling."
  echo
  machine
  versions
  echo
  python3 - "$RESULTS" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
groups = {}
for r in rows:
    groups.setdefault((r["scenario"], r["tool"], r["setting"]), []).append(r)
titles = {
    "pg-snapshot": "Postgres snapshot, 16-column table → Parquet (peer: → JSON-lines file)",
    "pg-cdc": "Postgres CDC catch-up (50% inserts, 30% updates, 20% deletes) → Parquet (peer: → JSON-lines file)",
    "mariadb-cdc": "MariaDB binlog catch-up (same mix) → Parquet (peer: canal, no-op handler)",
    "kafka-kfake": "Kafka JSON → Parquet, kfake",
    "kafka-broker": "Kafka JSON → Parquet, Apache Kafka broker (peer: → JSON-lines file)",
    "kafka-avro": "Kafka Avro (schema registry's wire format) → Parquet, Apache Kafka broker, the same messages",
    "ndjson": "The same messages as NDJSON from a file, parsed (no OpenETL row: see the Kafka rows)",
    "arrow-parquet": "Arrow batches → Parquet (zstd, 10 columns, sink/parquet's default dictionary choice on both sides), local disk",
    "arrow-clickhouse": "Arrow batches → ClickHouse, Engine=Null (13 columns, 100k-row blocks; checked by the server's InsertedRows)",
    "arrow-clickhouse-mt": "Arrow batches → ClickHouse, MergeTree, one run (read back with clickhouse-client)",
    "kafka-clickhouse": "Kafka JSON → ClickHouse MergeTree, Apache Kafka broker, the same messages (read back with clickhouse-client)",
    "kafka-chcluster": "Kafka JSON → ClickHouse cluster (ReplicatedMergeTree, ZooKeeper), the same messages (read back through remote() over the shards)",
    "arrow-postgres": "Arrow batches → Postgres (14 columns, 10k-row batches, 100k-row epochs each committed before the next; read back with psql)",
}
def fmt(v, d=0):
    return f"{v:,.{d}f}"
print("| scenario | tool | settings | rows/s (median, min–max) | vs ceiling | CPU-s / M rows | peak RSS MB | checks |")
print("|---|---|---|---:|---:|---:|---:|---|")
ceil = {}
for (sc, tool, st), rs in groups.items():
    good = [r for r in rs if r["ok"] == "ok" and float(r["seconds"]) > 0]
    if tool == "ceiling" and good:
        ceil[sc] = max(ceil.get(sc, 0), statistics.median(int(r["rows"]) / float(r["seconds"]) for r in good))
# The scenario's size: its OpenETL (or ceiling) rows; a group at another
# size (peers) says so in its settings.
size = {}
for (sc, tool, st), rs in groups.items():
    ok = [int(r["rows"]) for r in rs if r["ok"] == "ok"]
    if ok and (tool == "openetl" or sc not in size):
        size[sc] = max(ok)
shown = set()
for (sc, tool, st), rs in groups.items():
    good = [r for r in rs if r["ok"] == "ok" and float(r["seconds"]) > 0]
    bad = [r for r in rs if r not in good]
    title = "" if sc in shown else titles.get(sc, sc)
    shown.add(sc)
    checks = f"{len(good)}/{len(rs)} ok"
    if bad:
        checks += "; FAIL: " + bad[0]["detail"].replace("|", "/")[:160]
    if not good:
        print(f"| {title} | {tool} | {st} | — | — | — | — | {checks} |")
        continue
    n = max(int(r["rows"]) for r in good)
    if sc in size and n != size[sc]:
        st += f"; at {n:,} rows"
    rate = [int(r["rows"]) / float(r["seconds"]) for r in good]
    cpu = [float(r["cpu"]) / int(r["rows"]) * 1e6 for r in good]
    rss = [float(r["rss_mb"]) for r in good]
    m = statistics.median(rate)
    vs = "" if tool == "ceiling" or sc not in ceil else f"{m / ceil[sc]:.2f}"
    rng = f" ({fmt(min(rate))}–{fmt(max(rate))})" if len(rate) > 1 else ""
    print(f"| {title} | **{tool}** | {st} | {fmt(m)}{rng} | {vs} | {statistics.median(cpu):.2f} | {statistics.median(rss):.0f} | {checks} |")
PY
  echo
  echo "Not run, and why:"
  echo
  sed 's/^/- /' "$NOTES"
  echo "- Conduit on kfake or on the NDJSON file: on kfake it would repeat its broker row (the same client work against a"
  echo "  lighter broker) at several minutes a run, and Conduit's file source would not parse the JSON; Conduit runs"
  echo "  postgres → file and Postgres CDC → file (defaults and its advice), kafka → file (broker, its advice)."
  echo "- Benthos core has no Kafka input or Parquet output (those are in Redpanda Connect), so it reads the same"
  echo "  messages as NDJSON from a file and writes JSON lines: compare its CPU per row with the Kafka rows, not a ratio."
  echo "- pg_recvlogical's time includes starting the process, and it is checked by reaching the end LSN, not by rows"
  echo "  (the bare pglogrepl loop beside it counts and checks every change). Both ask for what source/postgres asks"
  echo "  for on PostgreSQL 14+: pgoutput v2 with streaming 'on'."
  echo "- Arrow → ClickHouse into Null tables runs the writer's Write and PreCommit only (its Commit copies staged rows,"
  echo "  which a Null staging table does not keep); the MergeTree rows run the whole path once, the writer's with its copy."
  if [ -s "$WORK/chserver.tsv" ]; then
    echo "- ClickHouse server CPU per million rows (median): $(python3 -c 'import sys, statistics
g = {}
for l in open(sys.argv[1]):
    sc, tool, v = l.split()
    g.setdefault((sc, tool), []).append(float(v))
print("; ".join("%s %s %.2f" % (sc, t, statistics.median(v)) for (sc, t), v in g.items()))' "$WORK/chserver.tsv")"
  fi
  if [ -s "$WORK/pgserver.tsv" ]; then
    echo "- Postgres server CPU-s per million rows (median; its processes' CPU from /proc): $(python3 -c 'import sys, statistics
g = {}
for l in open(sys.argv[1]):
    leg, v = l.split()
    g.setdefault(leg, []).append(float(v))
print("; ".join("%s %.2f" % (leg, statistics.median(v)) for leg, v in g.items()))' "$WORK/pgserver.tsv")"
  fi
  echo
  echo "Time per scenario (estimate from the script's EST_RATE, actual; preparation and peers included):"
  echo
  awk -F'\t' '{printf "- %s: estimated %d s, took %d s\n", $1, $2, $3}' "$WORK/times.tsv"
  echo "- builds and servers: $((T_SCEN - T_START)) s"
  echo "<!-- bench-compare:end -->"
} >"$WORK/table.md"

python3 - "$BENCH_OUT" "$WORK/table.md" <<'PY'
import sys
path, table = sys.argv[1], open(sys.argv[2]).read().rstrip("\n")
try:
    text = open(path).read()
except FileNotFoundError:
    text = ""
start, end = "<!-- bench-compare:start -->", "<!-- bench-compare:end -->"
if start in text and end in text:
    a, b = text.index(start), text.index(end) + len(end)
    text = text[:a] + table + text[b:]
else:
    text = text.rstrip("\n") + "\n\n" + table + "\n"
open(path, "w").write(text)
PY
cat "$WORK/table.md"
log "done in $(((SECONDS - T_START) / 60)) min; raw results in $RESULTS"
fails=$(awk -F'\t' 'NR > 1 && $9 != "ok"' "$RESULTS" | wc -l)
((fails == 0)) || log "$fails run(s) FAILED their check or budget: see the table"
if [ -n "$OVER" ]; then
  log "FAIL: over the $BUDGET_MIN-minute budget (a step was killed or runs were not made)"
  exit 1
fi
