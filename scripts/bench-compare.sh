#!/usr/bin/env bash
# Side-by-side benchmarks against peers (issue #11): prepares the data,
# runs each scenario for OpenETL (bench/cmd/openetl-bench), its ceiling
# and each peer it could build, checks every run's output against the
# source (count and a checksum over ids: a fast wrong answer is a
# failure, not a number), and writes a Markdown table between the
# bench-compare markers at the end of BENCHMARKS.md.
#
#   make bench-compare                       # full size, 5 runs each
#   RUNS=1 ROWS=small scripts/bench-compare.sh   # quick pass (a few minutes)
#
# Settings (environment):
#   RUNS        runs per tool and scenario (default 5); the table shows the
#               median and min–max
#   PEER_RUNS   runs of each peer (default RUNS): peers are the slowest
#               part of a full-size pass
#   ROWS        full (default: 5M Postgres rows, 2M changes, 10M Kafka
#               messages, 5M Arrow rows) or small (100k rows, 50k
#               changes, 200k messages, 200k rows)
#   PG_ROWS, CDC_CHANGES, KAFKA_MSGS, ARROW_ROWS   override the sizes
#   SCENARIOS   default "pg-snapshot pg-cdc mariadb-cdc kafka-kfake
#               kafka-broker ndjson arrow-parquet"
#   PEERS       default "conduit benthos canal"; "" runs OpenETL and ceilings only
#   BENCH_OUT   the Markdown file to update (default BENCHMARKS.md)
#
# Servers come from scripts/servers.sh (started here, stopped on exit).
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
PEER_RUNS=${PEER_RUNS:-$RUNS}
ROWS=${ROWS:-full}
case $ROWS in
full) PG_ROWS=${PG_ROWS:-5000000} KAFKA_MSGS=${KAFKA_MSGS:-10000000} ARROW_ROWS=${ARROW_ROWS:-5000000} CDC_CHANGES=${CDC_CHANGES:-2000000} ;;
small) PG_ROWS=${PG_ROWS:-100000} KAFKA_MSGS=${KAFKA_MSGS:-200000} ARROW_ROWS=${ARROW_ROWS:-200000} CDC_CHANGES=${CDC_CHANGES:-50000} ;;
*) echo "bench-compare: ROWS is full or small, not $ROWS" >&2; exit 2 ;;
esac
SCENARIOS=${SCENARIOS:-pg-snapshot pg-cdc mariadb-cdc kafka-kfake kafka-broker ndjson arrow-parquet}
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

rm -rf "$WORK"
mkdir -p "$WORK"
: >"$NOTES"
printf 'scenario\ttool\tsetting\trun\trows\tseconds\tcpu\trss_mb\tok\tdetail\tload\n' >"$RESULTS"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
T_START=$SECONDS

# ------------------------------------------------------------ build

log "building openetl-bench"
go build -o "$BIN" ./bench/cmd/openetl-bench
PY=$(scripts/test-tools.sh)

CONDUIT= BENTHOS=
if peer conduit && { has pg-snapshot || has pg-cdc || has kafka-broker; }; then
  log "building Conduit $CONDUIT_VERSION (minutes on a cold cache)"
  CONDUIT=$(build_conduit) || note "Conduit $CONDUIT_VERSION: build failed ($(tail -1 "$BENCH_DIR/logs/build-conduit.log"))"
fi
if peer benthos && has ndjson; then
  log "building Benthos $BENTHOS_VERSION"
  BENTHOS=$(build_benthos) || note "Benthos $BENTHOS_VERSION: build failed ($(tail -1 "$BENCH_DIR/logs/build-benthos.log"))"
fi

# ------------------------------------------------------------ servers

services=()
{ has pg-snapshot || has pg-cdc; } && services+=(postgres)
has kafka-broker && services+=(kafka)
has mariadb-cdc && services+=(mariadb)
SERVERS_DIR=
PEER_PIDS=()
stop_servers() {
  local p
  for p in "${PEER_PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  if [ -n "$SERVERS_DIR" ]; then
    scripts/servers.sh stop "$SERVERS_DIR" >/dev/null 2>&1 || true
  fi
}
trap stop_servers EXIT
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

# driver SCENARIO TOOL SETTING RUN N CPUS ARGS...: one openetl-bench run.
# Its JSON gives the timed section's wall and CPU seconds and peak RSS;
# the Parquet files it lists are read back with pyarrow and their ids
# checked against 1..N. Ceilings (no files) are checked by row count.
driver() {
  local sc=$1 tool=$2 set=$3 run=$4 n=$5 cpus=$6
  shift 6
  local out="$WORK/$sc-$tool-$run.json" ok detail
  if ! taskset -c "$cpus" "$BIN" "$@" >"$out" 2>"$out.err"; then
    result "$sc" "$tool" "$set" "$run" 0 0 0 0 FAIL "$(tail -1 "$out.err")"
    return 0
  fi
  local files
  files=$(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1])).get("files") or []))' "$out")
  if [ -n "$files" ] && [ "$n" = cdc ]; then
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

# timed OUTFILE CPUS CMD...: run CMD under /usr/bin/time; OUTFILE gets
# "elapsed user sys maxrss_kb".
timed() {
  local tf=$1 cpus=$2
  shift 2
  /usr/bin/time -f '%e %U %S %M' -o "$tf" taskset -c "$cpus" "$@"
}

# ------------------------------------------------------------ pg-snapshot

pg_prepare() {
  if [ "$(pg "SELECT count(*) FROM pg_tables WHERE tablename = '$PG_TABLE'")" = 1 ] &&
    [ "$(pg "SELECT count(*) FROM $PG_TABLE")" = "$PG_ROWS" ]; then
    return 0
  fi
  log "filling $PG_TABLE with $PG_ROWS rows"
  pg "DROP TABLE IF EXISTS $PG_TABLE"
  pg "CREATE TABLE $PG_TABLE (id int8 PRIMARY KEY, a int4, b int8, c float8, d numeric(12,2), e text,
    f bool, g timestamptz, h date, i uuid, j text, k int2, l float4, m varchar(32), n int8, o timestamp)"
  pg "INSERT INTO $PG_TABLE SELECT g, g % 100000, g::int8 * 7919, g / 7.0, (g % 1000000) / 100.0,
    'customer ' || g, g % 3 = 0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second',
    date '2020-01-01' + (g % 3000), md5(g::text)::uuid, repeat('x', g % 40), (g % 30000)::int2,
    (g % 1000) / 8.0, 'status-' || (g % 7), g::int8 * 31, timestamp '2024-06-01' + g * interval '1 millisecond'
    FROM generate_series(1, $PG_ROWS) g"
  pg "VACUUM ANALYZE $PG_TABLE"
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
  local t0 tpid cpid ok=FAIL detail rows=0 secs=0
  t0=$(date +%s%N)
  (cd "$dir" && exec /usr/bin/time -f '%e %U %S %M' -o "$dir/time" taskset -c "$TOOL_CPU" \
    "$CONDUIT" run --pipelines.path "$dir/pipeline.yaml" --db.type inmemory --api.enabled=false \
    --log.level warn --log.format json --pipelines.exit-on-degraded "$@") >"$dir/log" 2>&1 &
  tpid=$!
  sleep 0.5
  PEER_PIDS=("$tpid" $(ps -o pid= --ppid "$tpid"))
  taskset -c "$DB_CPU" "$BIN" check-jsonl -file "$dir/out.jsonl" -after "$marker" -n "$n" \
    -wait -since "$t0" -timeout "${CONDUIT_TIMEOUT:-20m}" >"$dir/check.json" 2>"$dir/check.err" &
  local fpid=$!
  # A Conduit that exits (a failed pipeline) ends the wait too.
  while kill -0 "$fpid" 2>/dev/null; do
    if ! kill -0 "$tpid" 2>/dev/null; then
      sleep 2
      kill "$fpid" 2>/dev/null || true
      echo "conduit exited before writing $n records" >>"$dir/check.err"
      break
    fi
    sleep 0.2
  done
  if wait "$fpid"; then
    rows=$(jget "$dir/check.json" rows)
    secs=$(jget "$dir/check.json" seconds)
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["check"]))' "$dir/check.json" >"$dir/ids.json"
    if [ "$check" = cdc ]; then
      detail=$(check_cdc "$dir/ids.json")
    else
      detail=$(check_ids "$dir/ids.json" "$n")
    fi
    [ "$detail" = ok ] && ok=ok
  else
    detail="no complete output: $(tail -1 "$dir/check.err"); conduit: $(grep -m1 -i 'error' "$dir/log" | cut -c1-200)"
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
# architecture v2, sdk.batch.size 10000, schema extraction off).
conduit_run() {
  local run=$1 set=$2 dir="$WORK/conduit-$2-$1"
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
          tables: '$PG_TABLE'
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
  conduit_follow pg-snapshot "$label" "$run" "$dir" '"after":' "$PG_ROWS" ids "${extra[@]}"
  sleep 1
  drop_slot "$slot"
}

scenario_pg_snapshot() {
  pin postgres "$DB_CPU"
  pg_prepare
  local r
  for ((r = 1; r <= RUNS; r++)); do
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
CDC_I=$((CDC_CHANGES / 2)) CDC_U=$((CDC_CHANGES * 3 / 10))
CDC_D=$((CDC_CHANGES - CDC_I - CDC_U))

# check_cdc JSON: "ok" when the change rows in JSON are exactly the
# changes pg_cdc_changes made: CDC_I inserts of ids 1..CDC_I, CDC_U
# updates of ids 1..CDC_U, CDC_D deletes of the last CDC_D ids (the ops
# are compared when JSON has them).
check_cdc() {
  python3 -c 'import json,sys
c=json.load(open(sys.argv[1])); i,u,d=map(int,sys.argv[2:5])
tri=lambda n: n*(n+1)//2
want={"count":i+u+d,"sum":tri(i)+tri(u)+tri(i)-tri(i-d),"min":1,"max":i}
bad=["%s %s != %s" % (k,c.get(k),v) for k,v in want.items() if c.get(k)!=v]
if "ops" in c:
    o={k:v for k,v in {"insert":i,"update":u,"delete":d}.items() if v}
    if c["ops"]!=o: bad.append("ops %s != %s" % (c["ops"],o))
if c.get("bad_lines"): bad.append("%d lines without an id" % c["bad_lines"])
print("ok" if not bad else "; ".join(bad))' "$1" "$CDC_I" "$CDC_U" "$CDC_D"
}

# pg_cdc_changes: CDC_I inserts, then CDC_U updates, then CDC_D deletes,
# in transactions of up to 10,000 changes.
pg_cdc_changes() {
  local f="$WORK/changes.sql" a
  : >"$f"
  for ((a = 1; a <= CDC_I; a += 10000)); do
    echo "INSERT INTO $CDC_TABLE SELECT g, g % 1000, 'row ' || g, g / 3.0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second', (g % 100000) / 100.0 FROM generate_series($a, $((a + 9999 < CDC_I ? a + 9999 : CDC_I))) g;" >>"$f"
  done
  for ((a = 1; a <= CDC_U; a += 10000)); do
    echo "UPDATE $CDC_TABLE SET a = a + 1, b = b || '!' WHERE id BETWEEN $a AND $((a + 9999 < CDC_U ? a + 9999 : CDC_U));" >>"$f"
  done
  for ((a = CDC_I - CDC_D + 1; a <= CDC_I; a += 10000)); do
    echo "DELETE FROM $CDC_TABLE WHERE id BETWEEN $a AND $((a + 9999 < CDC_I ? a + 9999 : CDC_I));" >>"$f"
  done
  "${PSQL[@]}" "$OPENETL_TEST_POSTGRES_DSN" -f "$f"
}

# conduit_cdc_run RUN: Conduit's Postgres CDC (no snapshot), with its
# performance advice, from a slot made before the changes, into a
# JSON-lines file.
conduit_cdc_run() {
  local run=$1 dir="$WORK/conduit-cdc-$1"
  mkdir -p "$dir"
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
          tables: '$CDC_TABLE'
          snapshotMode: never
          cdcMode: logrepl
          logrepl.slotName: 'cdc_conduit_$run'
          logrepl.publicationName: '$CDC_PUB'
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms
          sdk.schema.extract.payload.enabled: 'false'
          sdk.schema.extract.key.enabled: 'false'
          logrepl.withAvroSchema: 'false'
      - id: file
        type: destination
        plugin: builtin:file
        settings:
          path: '$dir/out.jsonl'
          sdk.batch.size: '10000'
          sdk.batch.delay: 100ms
EOF
  conduit_follow pg-cdc "arch v2, batch 10000 (100 ms), no schema extraction" "$run" "$dir" '"key":' \
    "$CDC_CHANGES" cdc --preview.pipeline-arch-v2
  sleep 1
  drop_slot "cdc_conduit_$run"
}

scenario_pg_cdc() {
  pin postgres "$DB_CPU"
  local r
  pg "DROP TABLE IF EXISTS $CDC_TABLE" 2>/dev/null
  pg "DROP PUBLICATION IF EXISTS $CDC_PUB" 2>/dev/null
  pg "CREATE TABLE $CDC_TABLE (id int8 PRIMARY KEY, a int4, b text, c float8, d timestamptz, e numeric(12,2))"
  pg "CREATE PUBLICATION $CDC_PUB FOR TABLE $CDC_TABLE"
  # One slot per run and tool, all made before the changes, so each
  # drains the same WAL once.
  for ((r = 1; r <= RUNS; r++)); do
    rm -rf "$WORK/cdc-$r"
    "$BIN" pg-cdc -table "$CDC_TABLE" -pub "$CDC_PUB" -slot "cdc_openetl_$r" -out "$WORK/cdc-$r" >/dev/null
    pg "SELECT pg_create_logical_replication_slot('cdc_recv_$r', 'pgoutput')" >/dev/null
    if [ -n "$CONDUIT" ] && ((r <= PEER_RUNS)); then
      pg "SELECT pg_create_logical_replication_slot('cdc_conduit_$r', 'pgoutput')" >/dev/null
    fi
  done
  log "making $CDC_CHANGES changes"
  pg_cdc_changes
  local end
  end=$(pg "SELECT pg_current_wal_lsn()")
  for ((r = 1; r <= RUNS; r++)); do
    log "pg-cdc run $r of $RUNS"
    local d="$WORK/recv-$r" ok=FAIL detail secs=0 cpu=0 rss=0
    mkdir -p "$d"
    if timed "$d/time" "$TOOL_CPU" pg_recvlogical -d "$OPENETL_TEST_POSTGRES_DSN" -S "cdc_recv_$r" --start \
      -E "$end" -o proto_version=1 -o "publication_names=$CDC_PUB" -f /dev/null --no-loop >"$d/log" 2>&1; then
      read -r secs u s m < <(tail -1 "$d/time")
      cpu=$(python3 -c "print($u + $s)") rss=$(python3 -c "print($m / 1024)")
      ok=ok detail="reached the end LSN (pg_recvlogical counts no rows)"
    else
      detail="pg_recvlogical failed: $(tail -1 "$d/log")"
    fi
    result pg-cdc ceiling "pg_recvlogical, pgoutput v1 → /dev/null" "$r" "$CDC_CHANGES" "$secs" "$cpu" "$rss" "$ok" "$detail"
    drop_slot "cdc_recv_$r"
    driver pg-cdc openetl "Parquet zstd, defaults" "$r" cdc "$TOOL_CPU" \
      pg-cdc -table "$CDC_TABLE" -pub "$CDC_PUB" -slot "cdc_openetl_$r" -out "$WORK/cdc-$r"
    drop_slot "cdc_openetl_$r"
    rm -rf "$WORK/cdc-$r"
    if [ -n "$CONDUIT" ] && ((r <= PEER_RUNS)); then
      conduit_cdc_run "$r"
    fi
  done
}

# ------------------------------------------------------------ mariadb-cdc

# my SQL: runs SQL on the MariaDB database of OPENETL_TEST_MARIADB_DSN.
my() {
  local d=$OPENETL_TEST_MARIADB_DSN user rest
  user=${d%%@*} rest=${d#*@}
  local hp=${rest%%/*}
  mariadb --protocol=tcp -h "${hp%%:*}" -P "${hp##*:}" -u "${user%%:*}" -p"${user#*:}" -N -B "${rest#*/}" -e "$1"
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
  my "source $f"
  end=$(my "SHOW MASTER STATUS" | awk '{print $1 ":" $2}')
  local canal_bin=""
  if peer canal; then
    canal_bin=$(build_canal) || note "go-mysql canal (bench/mysqlcanal): build failed ($(tail -1 "$BENCH_DIR/logs/build-canal.log"))"
  fi
  local d=$OPENETL_TEST_MARIADB_DSN user rest
  user=${d%%@*} rest=${d#*@}
  for ((r = 1; r <= RUNS; r++)); do
    log "mariadb-cdc run $r of $RUNS"
    driver mariadb-cdc ceiling "bare BinlogSyncer decode loop" "$r" "$CDC_CHANGES" "$TOOL_CPU" \
      mysql-ceiling -from "$start" -to "$end"
    driver mariadb-cdc openetl "Parquet zstd, defaults" "$r" cdc "$TOOL_CPU" \
      mysql-cdc -table "$t" -out "$WORK/mcdc-$r"
    rm -rf "$WORK/mcdc-$r"
    if [ -n "$canal_bin" ] && ((r <= PEER_RUNS)); then
      local o="$WORK/canal-$r.json" ok=FAIL detail rows=0 secs=0 cpu=0 rss=0
      if timed "$o.time" "$TOOL_CPU" "$canal_bin" -addr "${rest%%/*}" -user "${user%%:*}" -password "${user#*:}" \
        -table "${rest#*/}.$t" -from "$start" -to "$end" -want "$CDC_CHANGES" >"$o" 2>"$o.err"; then
        rows=$(jget "$o" changes) secs=$(jget "$o" seconds) cpu=$(jget "$o" cpu_seconds)
        read -r _ _ _ m < <(tail -1 "$o.time")
        rss=$(python3 -c "print($m / 1024)")
        if [ "$rows" = "$CDC_CHANGES" ]; then ok=ok detail=ok; else detail="changes $rows != $CDC_CHANGES"; fi
      else
        detail="mysqlcanal failed: $(tail -1 "$o.err" | cut -c1-200)"
      fi
      result mariadb-cdc canal "go-mysql v1.16.0 canal, no-op handler" "$r" "$rows" "$secs" "$cpu" "$rss" "$ok" "$detail"
    fi
  done
}

# ------------------------------------------------------------ kafka

scenario_kafka_kfake() {
  local r
  for ((r = 1; r <= RUNS; r++)); do
    log "kafka-kfake run $r of $RUNS"
    driver kafka-kfake ceiling "franz-go fetch → discard" "$r" "$KAFKA_MSGS" "$ALL_CPUS" \
      kafka-ceiling -kfake -n "$KAFKA_MSGS"
    rm -rf "$WORK/kafka-out"
    driver kafka-kfake openetl "Parquet zstd, defaults" "$r" "$KAFKA_MSGS" "$ALL_CPUS" \
      kafka -kfake -n "$KAFKA_MSGS" -out "$WORK/kafka-out"
    rm -rf "$WORK/kafka-out"
  done
}

# conduit_kafka_run RUN TOPIC: Conduit kafka → file, with its performance
# advice; the file destination writes each message's value as it is
# (the template record format), so the follower finds the ids.
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
    "$KAFKA_MSGS" ids --preview.pipeline-arch-v2
}

scenario_kafka_broker() {
  pin kafka "$DB_CPU"
  local topic="bench_$KAFKA_MSGS" r
  log "producing $KAFKA_MSGS messages to the broker"
  "$BIN" kafka-produce -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$KAFKA_MSGS" >/dev/null
  for ((r = 1; r <= RUNS; r++)); do
    log "kafka-broker run $r of $RUNS"
    driver kafka-broker ceiling "franz-go fetch → discard" "$r" "$KAFKA_MSGS" "$TOOL_CPU" \
      kafka-ceiling -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -n "$KAFKA_MSGS"
    rm -rf "$WORK/kafka-out"
    driver kafka-broker openetl "Parquet zstd, defaults" "$r" "$KAFKA_MSGS" "$TOOL_CPU" \
      kafka -brokers "$OPENETL_TEST_KAFKA_BROKERS" -topic "$topic" -out "$WORK/kafka-out"
    rm -rf "$WORK/kafka-out"
    if [ -n "$CONDUIT" ] && ((r <= PEER_RUNS)); then
      conduit_kafka_run "$r" "$topic"
    fi
  done
}

# ndjson: the Kafka scenario's messages as an NDJSON file, parsed by
# Benthos (content().parse_json()) and written back as JSON lines.
scenario_ndjson() {
  local in="$WORK/messages.ndjson" r
  "$BIN" kafka-produce -n "$KAFKA_MSGS" -ndjson "$in" >/dev/null
  if [ -z "$BENTHOS" ]; then
    return 0
  fi
  for ((r = 1; r <= PEER_RUNS; r++)); do
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
    local ok=FAIL detail rows=0 secs=0 cpu=0 rss=0
    if timed "$dir/time" "$ALL_CPUS" "$BENTHOS" -c "$dir/config.yaml" >"$dir/log" 2>&1; then
      read -r secs u s m < <(tail -1 "$dir/time")
      cpu=$(python3 -c "print($u + $s)") rss=$(python3 -c "print($m / 1024)")
      "$BIN" check-jsonl -file "$dir/out.jsonl" -n "$KAFKA_MSGS" >"$dir/check.json"
      rows=$(jget "$dir/check.json" rows)
      python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["check"]))' "$dir/check.json" >"$dir/ids.json"
      detail=$(check_ids "$dir/ids.json" "$KAFKA_MSGS")
      [ "$detail" = ok ] && ok=ok
    else
      detail="benthos failed: $(tail -1 "$dir/log" | cut -c1-200)"
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

# ------------------------------------------------------------ run

has pg-snapshot && scenario_pg_snapshot
has pg-cdc && scenario_pg_cdc
has mariadb-cdc && scenario_mariadb_cdc
has kafka-kfake && scenario_kafka_kfake
has kafka-broker && scenario_kafka_broker
has ndjson && scenario_ndjson
has arrow-parquet && scenario_arrow_parquet

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------ report

versions() {
  echo "- Go: $(go version | cut -d' ' -f3); OpenETL: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
  if [ -n "${OPENETL_TEST_POSTGRES_DSN:-}" ]; then
    echo "- PostgreSQL: $(pg 'SHOW server_version') (scripts/servers.sh: fsync=off, wal_level=logical)"
  fi
  has mariadb-cdc && echo "- MariaDB: $(my 'SELECT VERSION()') (scripts/services/mariadb.sh, binlog_format=ROW, full images)"
  has kafka-broker && echo "- Kafka: Apache Kafka $(sed -n 's/^KAFKA_VERSION=//p' scripts/servers.sh) (KRaft, one broker, JVM -Xmx512m)"
  has kafka-kfake && echo "- kfake: franz-go's in-process cluster (in the tool's process: flatters both sides)"
  [ -n "$CONDUIT" ] && echo "- Conduit $CONDUIT_VERSION (built from source by bench/peers.sh, with $(go version -m "$CONDUIT" | awk '$1=="dep" && $2 ~ /conduit-connector-(postgres|file|kafka)$/ {sub(/.*\//, "", $2); printf "%s%s %s", n++ ? ", " : "", $2, $3}'); records written as JSON lines by its file destination)"
  [ -n "$BENTHOS" ] && echo "- Benthos core $BENTHOS_VERSION (built from source by bench/peers.sh)"
  true
}

machine() {
  local model mem
  model=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
  mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)
  echo "- Machine: $model, $(nproc) CPUs, $mem, $(uname -sr)"
  echo "- Load average (1, 5, 15 min): $LOAD_START at the start, $LOAD_END at the end"
}

{
  echo "<!-- bench-compare:start -->"
  echo "## Side by side (scripts/bench-compare.sh)"
  echo
  echo "Written by \`make bench-compare\` on $(date -u '+%Y-%m-%d %H:%M UTC') in $(((SECONDS - T_START) / 60)) min: $RUNS run(s) per tool ($PEER_RUNS per peer), ROWS=$ROWS"
  echo "($PG_ROWS Postgres rows, $CDC_CHANGES changes, $KAFKA_MSGS Kafka messages of ~200 bytes, $ARROW_ROWS Arrow rows). Median, with min–max over the runs;"
  echo "CPU is the tool's user+sys CPU per million rows (OpenETL and ceilings: getrusage of the timed section;"
  echo "peers: /usr/bin/time of the whole process), peak RSS is VmHWM / max RSS. Every run's output is checked"
  echo "against the source (count, distinct ids, min, max, sum over ids 1..N); a run that fails is marked FAIL"
  echo "and left out of the figures. With a server, the server is pinned to CPU $DB_CPU and the tool to CPU $TOOL_CPU;"
  echo "without one (kfake, ndjson) the tool gets CPUs $ALL_CPUS."
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
    "ndjson": "The same messages as NDJSON from a file, parsed (no OpenETL row: see the Kafka rows)",
    "arrow-parquet": "Arrow batches → Parquet (zstd, 10 columns), local disk",
}
def fmt(v, d=0):
    return f"{v:,.{d}f}"
print("| scenario | tool | settings | rows/s (median, min–max) | vs ceiling | CPU-s / M rows | peak RSS MB | load (1 min) | checks |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
ceil = {}
for (sc, tool, st), rs in groups.items():
    good = [r for r in rs if r["ok"] == "ok" and float(r["seconds"]) > 0]
    if tool == "ceiling" and good:
        ceil[sc] = statistics.median(int(r["rows"]) / float(r["seconds"]) for r in good)
shown = set()
for (sc, tool, st), rs in groups.items():
    good = [r for r in rs if r["ok"] == "ok" and float(r["seconds"]) > 0]
    bad = [r for r in rs if r not in good]
    loads = [float(r["load"]) for r in rs]
    load = f"{min(loads):.1f}–{max(loads):.1f}" if len(loads) > 1 else f"{loads[0]:.1f}"
    title = "" if sc in shown else titles.get(sc, sc)
    shown.add(sc)
    checks = f"{len(good)}/{len(rs)} ok"
    if bad:
        checks += "; FAIL: " + bad[0]["detail"].replace("|", "/")[:160]
    if not good:
        print(f"| {title} | {tool} | {st} | — | — | — | — | {load} | {checks} |")
        continue
    rate = [int(r["rows"]) / float(r["seconds"]) for r in good]
    cpu = [float(r["cpu"]) / int(r["rows"]) * 1e6 for r in good]
    rss = [float(r["rss_mb"]) for r in good]
    m = statistics.median(rate)
    vs = "" if tool == "ceiling" or sc not in ceil else f"{m / ceil[sc]:.2f}"
    rng = f" ({fmt(min(rate))}–{fmt(max(rate))})" if len(rate) > 1 else ""
    print(f"| {title} | **{tool}** | {st} | {fmt(m)}{rng} | {vs} | {statistics.median(cpu):.2f} | {statistics.median(rss):.0f} | {load} | {checks} |")
PY
  echo
  echo "Not run, and why:"
  echo
  sed 's/^/- /' "$NOTES"
  echo "- Conduit on kfake or on the NDJSON file: kfake lives inside the tool's process, and Conduit's file source"
  echo "  would not parse the JSON; Conduit runs postgres → file, Postgres CDC → file (its advice only) and kafka → file (broker)."
  echo "- Benthos core has no Kafka input or Parquet output (those are in Redpanda Connect), so it reads the same"
  echo "  messages as NDJSON from a file and writes JSON lines: compare its CPU per row with the Kafka rows, not a ratio."
  echo "- The CDC ceiling is pg_recvlogical only (the bare pglogrepl loop is in source/postgres's benchmark);"
  echo "  its time includes starting the process, and it is checked by reaching the end LSN, not by rows."
  echo "- Arrow → ClickHouse (Null engine) is not in this script yet: see sink/clickhouse's benchmarks above."
  echo "<!-- bench-compare:end -->"
} >"$WORK/table.md"

python3 - "$BENCH_OUT" "$WORK/table.md" <<'PY'
import sys
path, table = sys.argv[1], open(sys.argv[2]).read().rstrip("\n")
text = open(path).read()
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
