#!/usr/bin/env bash
# Starts the real servers the integration tests use, on free loopback ports
# in a temporary directory, and stops them by PID. The same script runs in
# CI and on a laptop; no Docker.
#
#   env=$(scripts/servers.sh start) && eval "$env"
#                                        # installs what is missing, starts,
#                                        # waits until ready, prints exports
#                                        # (plain eval "$(...)" would hide a
#                                        # failed start: eval "" succeeds)
#   ...tests read OPENETL_TEST_* ...
#   scripts/servers.sh stop              # kills what start started
#
# Subcommands:
#   install [SERVICE...]  install what is missing (idempotent), print nothing
#   start [SERVICE...]    install, start and print `export` lines; also
#                         written to $OPENETL_SERVERS_DIR/env. If
#                         OPENETL_SERVERS_DIR names a directory whose
#                         servers are still running, they are reused.
#   env                   print $OPENETL_SERVERS_DIR/env
#   stop [DIR]            kill the servers of DIR (default
#                         $OPENETL_SERVERS_DIR) and remove DIR
#   down SERVICE          stop one service of $OPENETL_SERVERS_DIR, keeping
#                         its port and data (s3, kafka, postgres, mariadb)
#   up SERVICE            start it again from them; waits until ready
#
#   apt PACKAGE...        install Debian packages the way install does (one
#                         apt-get run, waiting for a dpkg lock held by
#                         someone else; used by scripts/test-servers.sh)
#
# Services: s3 (versitygw), gcs (fake-gcs-server), azure (azurite), kafka
# (Apache Kafka in KRaft mode, from Maven Central), postgres (PostgreSQL 15
# from Debian, wal_level=logical). Default: all. Each service is a set of
# functions named after it: install_NAME, start_NAME (picks a port into
# $DIR/NAME.port, starts the process with launch), ready_NAME (runs once
# the port answers: creates buckets and the like), env_NAME (prints
# exports), and optionally debs_NAME (prints the Debian packages the
# service still lacks). Add a service by adding those and its name to
# ALL_SERVICES, here or in a file scripts/services/NAME.sh.
#
# Installs cannot race: every missing Debian package of the requested
# services is installed by one apt-get run before anything else (apt-get
# update runs at most once, and only when the package lists lack a package
# or an install fails on them), apt waits for a dpkg lock another process
# holds, and each service's own install runs under a lock of its own, so
# two servers.sh runs at once install a thing once.
#
# Tools are installed under $OPENETL_CACHE/tools (default
# ~/.cache/openetl/tools), never into the repository. Progress and install
# logs go to stderr; stdout carries only the exports.
set -euo pipefail

ALL_SERVICES=(s3 gcs azure kafka postgres)

CACHE="${OPENETL_CACHE:-$HOME/.cache/openetl}"
TOOLS="$CACHE/tools"
GOBIN_DIR="$TOOLS/bin"
NODE_DIR="$TOOLS/node"

VERSITYGW_VERSION=v1.8.0
FAKE_GCS_VERSION=v1.56.1
AZURITE_VERSION=3.37.0
# Also the default in scripts/kafka/pom.xml (kafka.version); keep them equal.
KAFKA_VERSION=4.1.1
KAFKA_DIR="$TOOLS/kafka/$KAFKA_VERSION"
SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Test credentials: local servers only.
S3_ACCESS_KEY=openetl
S3_SECRET_KEY=openetl-secret
S3_REGION=us-east-1
AZURE_ACCOUNT=devstoreaccount1
# The well-known Azurite development key (public, documented by Microsoft).
AZURE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
BUCKET=openetl-test

log() { echo "servers.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- helpers

# free_port prints a TCP port on 127.0.0.1 that nothing uses now, outside
# the kernel's ephemeral range (net.ipv4.ip_local_port_range): a test that
# kills a server and starts it again on its port (a ClickHouse replica, a
# Postgres standby) would otherwise find it taken, now and then, by the
# local end of some outgoing connection made meanwhile.
free_port() {
  python3 - <<'PY'
import random, socket
try:
    lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
except (OSError, ValueError):
    lo, hi = 32768, 60999
ports = [p for p in range(10000, 65536) if not lo <= p <= hi]
random.shuffle(ports)
for p in ports + [0]:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        print(s.getsockname()[1])
        break
    except OSError:
        pass
    finally:
        s.close()
PY
}

# wait_port NAME: poll until the service's port accepts connections.
# Returns 1 if its process exits first (say, the port was taken between
# free_port and the bind) or 60 s pass (WAIT_PORT_SECS[NAME] for a
# service that sets it: one that opens its port only when fully started).
declare -A WAIT_PORT_SECS=()
wait_port() {
  local name=$1 port pid i secs=${WAIT_PORT_SECS[$1]:-60}
  port=$(cat "$DIR/$name.port")
  pid=$(pid_of "$name")
  for ((i = 0; i < secs * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name exited during startup: $(tail -3 "$DIR/$name.log" 2>/dev/null)"
      return 1
    fi
    sleep 0.1
  done
  log "$name did not listen on 127.0.0.1:$port within ${secs}s; see $DIR/$name.log"
  return 1
}

# launch NAME CMD...: start CMD in the background with its output in
# $DIR/NAME.log, in its own process group, and record its PID.
launch() {
  local name=$1
  shift
  setsid "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

pid_of() { cat "$DIR/$1.pid" 2>/dev/null || true; }

alive() {
  local pid
  pid=$(pid_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

# go_tool BIN MODULE/CMD@VERSION: go install into $GOBIN_DIR unless the
# binary is there and was built from that version.
go_tool() {
  local bin=$1 pkg=$2 want=${2##*@}
  if [ -x "$GOBIN_DIR/$bin" ] &&
    go version -m "$GOBIN_DIR/$bin" 2>/dev/null | awk '$1 == "mod" {print $3}' | grep -qx "$want"; then
    return 0
  fi
  mkdir -p "$GOBIN_DIR"
  log "installing $pkg (a few minutes on a cold machine)"
  local t0=$SECONDS
  # Outside any module, so the repository's go.mod is untouched.
  (cd "$TOOLS" && GOBIN="$GOBIN_DIR" GOFLAGS=-buildvcs=false go install "$pkg") >&2
  log "installed $bin in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- Debian packages

# How long apt waits for a dpkg or package-list lock held by another
# process (an unattended upgrade, a second servers.sh) before giving up.
APT_LOCK_TIMEOUT=${OPENETL_APT_LOCK_TIMEOUT:-900}

apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" "$@" >&2
}

# apt_update refreshes the package lists. apt-get update does not wait for
# the lists lock (DPkg::Lock::Timeout covers the dpkg locks only), so a
# held lock is waited for here.
apt_update() {
  local t0=$SECONDS out
  while :; do
    out=$(DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" update 2>&1) && {
      echo "$out" >&2
      return 0
    }
    echo "$out" >&2
    grep -q 'Could not get lock' <<<"$out" || return 1
    ((SECONDS - t0 < APT_LOCK_TIMEOUT)) || return 1
    log "apt-get update: the package lists are locked by another process; waiting"
    sleep 2
  done
}

# apt_install PACKAGE...: one apt-get run for all of them. The lists are
# updated first only when they don't know a package, and at most once more
# when the install fails (stale lists name files the mirror no longer has).
# A policy-rc.d keeps the packages' postinst scripts from starting system
# servers (the tests start their own), unless the machine has one. Runs
# under $TOOLS/.apt.lock, so concurrent servers.sh runs take turns.
apt_install() {
  (($# > 0)) || return 0
  command -v apt-get >/dev/null || die "need Debian packages $* and there is no apt-get to install them"
  [ "$(id -u)" = 0 ] || die "need Debian packages $*: run as root (apt-get install)"
  mkdir -p "$TOOLS"
  (
    exec 8>"$TOOLS/.apt.lock"
    flock 8
    local policy=/usr/sbin/policy-rc.d made= rc=0 updated= p t0=$SECONDS
    for p in "$@"; do
      if ! apt-cache show --no-all-versions "$p" >/dev/null 2>&1; then
        log "the package lists don't know $p: apt-get update"
        apt_update || die "apt-get update failed"
        updated=1
        break
      fi
    done
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
    fi
    log "installing Debian packages: $*"
    # --no-upgrade: a package that is installed already stays at its
    # version. Upgrading one under a server that runs from it breaks the
    # server (Postgres 15.18 loading 15.20's plpgsql.so: "undefined
    # symbol"), and a test run must not change the machine's versions.
    apt_get install -y --no-install-recommends --no-upgrade "$@" ||
      { [ -z "$updated" ] && apt_update && apt_get install -y --no-install-recommends --no-upgrade "$@"; } || rc=1
    [ -n "$made" ] && rm -f "$policy"
    [ $rc -eq 0 ] || die "apt-get could not install $*"
    log "installed $* in $((SECONDS - t0))s"
  )
}

# ---------------------------------------------------------------- s3: versitygw

install_s3() { go_tool versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"; }

start_s3() {
  S3_PORT=$(free_port)
  mkdir -p "$DIR/s3"
  echo "$S3_PORT" >"$DIR/s3.port"
  run_s3
}

# run_NAME starts a service that start_NAME prepared, on its port, from
# its data (cmd_up runs it again after cmd_down).
run_s3() {
  ROOT_ACCESS_KEY=$S3_ACCESS_KEY ROOT_SECRET_KEY=$S3_SECRET_KEY \
    launch s3 "$GOBIN_DIR/versitygw" --port "127.0.0.1:$(cat "$DIR/s3.port")" posix "$DIR/s3"
}

ready_s3() {
  S3_PORT=$(cat "$DIR/s3.port")
  # CreateBucket, signed with SigV4 by curl.
  local code
  code=$(curl -s -o "$DIR/s3.create" -w '%{http_code}' -X PUT -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
    "http://127.0.0.1:$S3_PORT/$BUCKET")
  case $code in
  200 | 409) ;;
  *) die "s3: create bucket $BUCKET: HTTP $code: $(cat "$DIR/s3.create")" ;;
  esac
}

env_s3() {
  local ep
  ep="http://127.0.0.1:$(cat "$DIR/s3.port")"
  cat <<EOF
export OPENETL_TEST_S3_ENDPOINT='$ep'
export OPENETL_TEST_S3_BUCKET='$BUCKET'
export OPENETL_TEST_S3_REGION='$S3_REGION'
export OPENETL_TEST_S3_ACCESS_KEY='$S3_ACCESS_KEY'
export OPENETL_TEST_S3_SECRET_KEY='$S3_SECRET_KEY'
export OPENETL_TEST_S3_URL='s3://$BUCKET?endpoint=$ep&use_path_style=true&region=$S3_REGION&disable_https=true'
export AWS_ACCESS_KEY_ID='$S3_ACCESS_KEY'
export AWS_SECRET_ACCESS_KEY='$S3_SECRET_KEY'
EOF
}

# ---------------------------------------------------------------- gcs: fake-gcs-server

install_gcs() { go_tool fake-gcs-server "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"; }

start_gcs() {
  GCS_PORT=$(free_port)
  echo "$GCS_PORT" >"$DIR/gcs.port"
  # Without -public-host, reads of written objects 404.
  launch gcs "$GOBIN_DIR/fake-gcs-server" -scheme http -host 127.0.0.1 -port "$GCS_PORT" \
    -public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT" -backend memory
}

ready_gcs() {
  GCS_PORT=$(cat "$DIR/gcs.port")
  local code
  code=$(curl -s -o "$DIR/gcs.create" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    -d "{\"name\":\"$BUCKET\"}" "http://127.0.0.1:$GCS_PORT/storage/v1/b?project=openetl")
  case $code in
  200 | 409) ;;
  *) die "gcs: create bucket $BUCKET: HTTP $code: $(cat "$DIR/gcs.create")" ;;
  esac
}

env_gcs() {
  cat <<EOF
export STORAGE_EMULATOR_HOST='127.0.0.1:$(cat "$DIR/gcs.port")'
export OPENETL_TEST_GCS_BUCKET='$BUCKET'
export OPENETL_TEST_GCS_URL='gs://$BUCKET'
EOF
}

# ---------------------------------------------------------------- azure: azurite

install_azure() {
  local have
  have=$(node -p "require('$NODE_DIR/node_modules/azurite/package.json').version" 2>/dev/null || true)
  [ "$have" = "$AZURITE_VERSION" ] && return 0
  command -v npm >/dev/null || die "azure: npm is needed to install azurite"
  mkdir -p "$NODE_DIR"
  log "installing azurite@$AZURITE_VERSION (about 1.5 minutes on a cold machine)"
  local t0=$SECONDS
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >&2
  log "installed azurite in $((SECONDS - t0))s"
}

start_azure() {
  AZ_PORT=$(free_port)
  mkdir -p "$DIR/azure"
  echo "$AZ_PORT" >"$DIR/azure.port"
  launch azure "$NODE_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" \
    --location "$DIR/azure" --skipApiVersionCheck --loose --disableTelemetry
}

ready_azure() {
  AZ_PORT=$(cat "$DIR/azure.port")
  # Create Container with a SharedKey signature (no Azure CLI here).
  AZ_PORT=$AZ_PORT AZ_ACCOUNT=$AZURE_ACCOUNT AZ_KEY=$AZURE_KEY AZ_CONTAINER=$BUCKET node -e '
const crypto = require("crypto"), http = require("http");
const {AZ_PORT: port, AZ_ACCOUNT: acct, AZ_KEY: key, AZ_CONTAINER: c} = process.env;
const date = new Date().toUTCString(), version = "2021-12-02";
const sts = "PUT\n\n\n\n\n\n\n\n\n\n\n\n" + "x-ms-date:" + date + "\nx-ms-version:" + version +
  "\n/" + acct + "/" + acct + "/" + c + "\nrestype:container";
const sig = crypto.createHmac("sha256", Buffer.from(key, "base64")).update(sts, "utf8").digest("base64");
const req = http.request({host: "127.0.0.1", port, method: "PUT", path: "/" + acct + "/" + c + "?restype=container",
  headers: {"x-ms-date": date, "x-ms-version": version, "Authorization": "SharedKey " + acct + ":" + sig, "Content-Length": 0}},
  (res) => { let b = ""; res.on("data", (d) => b += d); res.on("end", () => {
    if (res.statusCode === 201 || res.statusCode === 409) process.exit(0);
    console.error("azure: create container: HTTP " + res.statusCode + ": " + b); process.exit(1); }); });
req.on("error", (e) => { console.error("azure: create container: " + e.message); process.exit(1); });
req.end();' || die "azure: could not create container $BUCKET"
}

env_azure() {
  local port
  port=$(cat "$DIR/azure.port")
  cat <<EOF
export OPENETL_TEST_AZURE_ENDPOINT='http://127.0.0.1:$port/$AZURE_ACCOUNT'
export OPENETL_TEST_AZURE_ACCOUNT='$AZURE_ACCOUNT'
export OPENETL_TEST_AZURE_KEY='$AZURE_KEY'
export OPENETL_TEST_AZURE_CONTAINER='$BUCKET'
export OPENETL_TEST_AZURE_URL='azblob://$BUCKET?protocol=http&domain=127.0.0.1:$port&localemu=true'
export AZURE_STORAGE_ACCOUNT='$AZURE_ACCOUNT'
export AZURE_STORAGE_KEY='$AZURE_KEY'
EOF
}

# ---------------------------------------------------------------- kafka: Apache Kafka (KRaft)

# The broker's jars (kafka_2.13 and its runtime dependencies) from Maven
# Central, copied by mvn from scripts/kafka/pom.xml into $KAFKA_DIR/libs;
# a marker file says the copy finished. Needs java (17+) and mvn.
install_kafka() {
  [ -f "$KAFKA_DIR/.complete" ] && return 0
  command -v mvn >/dev/null || die "kafka: mvn is needed to fetch the broker from Maven Central"
  command -v java >/dev/null || die "kafka: java (17 or later) is needed to run the broker"
  log "installing Apache Kafka $KAFKA_VERSION from Maven Central"
  local t0=$SECONDS
  rm -rf "$KAFKA_DIR/libs"
  mkdir -p "$KAFKA_DIR"
  mvn -q -B -f "$SCRIPTS/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$KAFKA_DIR/libs" >&2
  touch "$KAFKA_DIR/.complete"
  log "installed kafka in $((SECONDS - t0))s"
}

# One process in KRaft mode (broker and controller), its data in
# $DIR/kafka, formatted first with kafka.tools.StorageTool (what
# kafka-storage.sh runs) as a standalone controller quorum.
start_kafka() {
  local port cport cp log4j
  port=$(free_port)
  cport=$(free_port)
  echo "$port" >"$DIR/kafka.port"
  rm -rf "$DIR/kafka"
  mkdir -p "$DIR/kafka"
  sed -e "s#@PORT@#$port#g; s#@CONTROLLER_PORT@#$cport#g; s#@DIR@#$DIR/kafka#g" \
    "$SCRIPTS/kafka/server.properties.in" >"$DIR/kafka/server.properties"
  cp="$KAFKA_DIR/libs/*"
  log4j="-Dlog4j2.configurationFile=$SCRIPTS/kafka/log4j2.properties"
  java "$log4j" -cp "$cp" kafka.tools.StorageTool format --standalone \
    -t "$(java "$log4j" -cp "$cp" kafka.tools.StorageTool random-uuid)" \
    -c "$DIR/kafka/server.properties" >"$DIR/kafka.format.log" 2>&1 ||
    die "kafka: storage format failed: $(tail -3 "$DIR/kafka.format.log")"
  run_kafka
}

run_kafka() {
  launch kafka java -Xms256m -Xmx512m -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$SCRIPTS/kafka/log4j2.properties" \
    -cp "$KAFKA_DIR/libs/*" kafka.Kafka "$DIR/kafka/server.properties"
}

# The port answers before the broker has joined its own quorum: wait for
# KafkaRaftServer's "Kafka Server started" (logged at INFO by
# scripts/kafka/log4j2.properties).
ready_kafka() {
  local i
  for ((i = 0; i < 600; i++)); do
    grep -q "Kafka Server started" "$DIR/kafka.log" 2>/dev/null && return 0
    alive kafka || die "kafka exited during startup: $(tail -5 "$DIR/kafka.log")"
    sleep 0.1
  done
  die "kafka did not start within 60s; see $DIR/kafka.log"
}

env_kafka() {
  cat <<EOF
export OPENETL_TEST_KAFKA_BROKERS='127.0.0.1:$(cat "$DIR/kafka.port")'
EOF
}

# ---------------------------------------------------------------- postgres: PostgreSQL 15

PG_BIN=/usr/lib/postgresql/15/bin

# Debian's postgresql-15, only when its binaries are missing (installing
# over an existing one would upgrade it). cmd_install installs every
# service's packages in one apt-get run before the other installs.
debs_postgres() { [ -x "$PG_BIN/postgres" ] && [ -x "$PG_BIN/initdb" ] || echo postgresql-15; }

install_postgres() {
  [ -x "$PG_BIN/postgres" ] && [ -x "$PG_BIN/initdb" ] ||
    die "postgres: $PG_BIN/postgres is missing (Debian's postgresql-15 provides it)"
}

# A fresh cluster in $DIR/postgres, owned by the postgres user (Postgres
# refuses to run as root), trusting local connections (replication
# included), with logical decoding on. The postmaster runs in the
# foreground under launch, so stop_one stops it by its process group.
start_postgres() {
  local port data=$DIR/postgres
  port=$(free_port)
  echo "$port" >"$DIR/postgres.port"
  rm -rf "$data"
  mkdir -p "$data"
  chmod 711 "$DIR"
  chown postgres: "$data"
  runuser -u postgres -- "$PG_BIN/initdb" -D "$data/data" -U postgres -A trust --no-sync -E UTF8 \
    --locale=C.UTF-8 >"$DIR/postgres.initdb.log" 2>&1 ||
    die "postgres: initdb failed: $(tail -3 "$DIR/postgres.initdb.log")"
  run_postgres
}

run_postgres() {
  local data=$DIR/postgres
  launch postgres runuser -u postgres -- "$PG_BIN/postgres" -D "$data/data" -p "$(cat "$DIR/postgres.port")" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories="$data" -c wal_level=logical \
    -c max_replication_slots=20 -c max_wal_senders=20 -c fsync=off \
    -c full_page_writes=off
}

ready_postgres() {
  local port i
  port=$(cat "$DIR/postgres.port")
  for ((i = 0; i < 600; i++)); do
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres && return 0
    alive postgres || die "postgres exited during startup: $(tail -5 "$DIR/postgres.log")"
    sleep 0.1
  done
  die "postgres did not accept connections within 60s; see $DIR/postgres.log"
}

env_postgres() {
  cat <<EOF
export OPENETL_TEST_POSTGRES_DSN='postgres://postgres@127.0.0.1:$(cat "$DIR/postgres.port")/postgres?sslmode=disable'
EOF
}

# ---------------------------------------------------------------- more services

# Each scripts/services/NAME.sh defines install_NAME, start_NAME,
# ready_NAME and env_NAME (the same contract as above) and appends NAME to
# ALL_SERVICES, so a service can be added without touching this file.
for f in "$SCRIPTS"/services/*.sh; do
  [ -e "$f" ] || continue
  # shellcheck source=/dev/null
  . "$f"
done

# ---------------------------------------------------------------- commands

services() {
  local s
  if [ $# -eq 0 ]; then
    echo "${ALL_SERVICES[@]}"
    return
  fi
  for s in "$@"; do
    [[ " ${ALL_SERVICES[*]} " == *" $s "* ]] || die "unknown service $s (have: ${ALL_SERVICES[*]})"
  done
  echo "$@"
}

cmd_install() {
  local svcs s pids=() names=() i rc=0 debs=() d
  read -ra svcs <<<"$(services "$@")"
  mkdir -p "$TOOLS"
  # First every Debian package any of them lacks, in one apt-get run: two
  # apt-gets at once fail on the dpkg lock.
  for s in "${svcs[@]}"; do
    if declare -F "debs_$s" >/dev/null; then
      read -ra d <<<"$("debs_$s")"
      debs+=("${d[@]}")
    fi
  done
  apt_install "${debs[@]}" || return 1
  # The rest are slow and independent: run them in parallel, each under a
  # lock of its own so a concurrent servers.sh waits rather than installs
  # the same thing into the same directory.
  for s in "${svcs[@]}"; do
    (
      exec 9>"$TOOLS/.install-$s.lock"
      flock 9
      "install_$s"
    ) &
    pids+=($!)
    names+=("$s")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { log "install of ${names[$i]} failed"; rc=1; }
  done
  return $rc
}

cmd_start() {
  local svcs s created=
  read -ra svcs <<<"$(services "$@")"
  cmd_install "${svcs[@]}"
  if [ -n "${OPENETL_SERVERS_DIR:-}" ] && [ -d "$OPENETL_SERVERS_DIR" ]; then
    DIR=$OPENETL_SERVERS_DIR
  else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/openetl-servers.XXXXXX")
    created=1
  fi
  STARTED=()
  # On any failure from here on, stop what this run started (and remove
  # DIR if this run made it), so a failed start leaves nothing running.
  trap 'start_failed "$created"' EXIT
  # Start everything, then wait for each: the servers boot in parallel.
  for s in "${svcs[@]}"; do
    if alive "$s"; then
      log "$s already running (pid $(pid_of "$s"))"
    else
      "start_$s"
      STARTED+=("$s")
    fi
  done
  local attempt
  for s in "${svcs[@]}"; do
    for ((attempt = 1; ; attempt++)); do
      wait_port "$s" && break
      ((attempt < 3)) || die "$s did not start; see $DIR/$s.log"
      log "$s: starting again on another port"
      stop_one "$s"
      "start_$s"
    done
    "ready_$s"
  done
  # The env file covers every service running from DIR, including ones an
  # earlier start into the same DIR began.
  {
    echo "export OPENETL_SERVERS_DIR='$DIR'"
    for s in "${ALL_SERVICES[@]}"; do
      if alive "$s"; then "env_$s"; fi
    done
  } >"$DIR/env.tmp"
  mv "$DIR/env.tmp" "$DIR/env"
  trap - EXIT
  log "ready: ${svcs[*]} (logs and data in $DIR)"
  cat "$DIR/env"
}

start_failed() {
  local rc=$? s
  for s in "${STARTED[@]}"; do
    stop_one "$s"
  done
  if [ -n "$1" ]; then
    rm -rf "$DIR"
  fi
  exit "$rc"
}

stop_one() {
  local name=$1 pid i
  pid=$(pid_of "$name")
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    # launch used setsid, so the PID is also the process group: this
    # stops the server and any children it spawned, and nothing else.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/$name.pid"
}

# cmd_down NAME: stop one running service of $OPENETL_SERVERS_DIR and
# keep its port and data, for cmd_up to start it again: what a test of
# an outage or a server restart needs. Postgres stops with pg_ctl stop
# -m fast (clients are disconnected, a shutdown checkpoint is written);
# the others get SIGTERM, and SIGKILL after 5 s.
cmd_down() {
  local name=${1:?down: name a service}
  DIR=${OPENETL_SERVERS_DIR:?down: OPENETL_SERVERS_DIR is not set}
  alive "$name" || die "down: $name is not running from $DIR"
  if [ "$name" = postgres ]; then
    runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$DIR/postgres/data" -m fast -w -t 60 stop >&2 ||
      log "down: pg_ctl stop failed; stopping by signal"
  fi
  stop_one "$name"
  log "$name down (port $(cat "$DIR/$name.port") kept)"
}

# cmd_up NAME: start a service cmd_down stopped, on the same port from
# the same data, and wait until it is ready.
cmd_up() {
  local name=${1:?up: name a service}
  DIR=${OPENETL_SERVERS_DIR:?up: OPENETL_SERVERS_DIR is not set}
  [ -f "$DIR/$name.port" ] || die "up: $name was never started in $DIR"
  alive "$name" && die "up: $name is running already"
  declare -F "run_$name" >/dev/null || die "up: $name can't be started again (no run_$name)"
  "run_$name"
  wait_port "$name" || die "up: $name did not start again; see $DIR/$name.log"
  "ready_$name"
  log "$name up again on port $(cat "$DIR/$name.port")"
}

cmd_stop() {
  DIR=${1:-${OPENETL_SERVERS_DIR:-}}
  [ -n "$DIR" ] || die "stop: no directory: set OPENETL_SERVERS_DIR or pass it"
  [ -d "$DIR" ] || return 0
  [ -f "$DIR/env" ] || ls "$DIR"/*.pid >/dev/null 2>&1 || die "stop: $DIR is not a servers directory"
  # TERM every server first, then wait for them together (5 s in all,
  # then KILL): one at a time, the slow ones (Kafka, ClickHouse, the JVMs)
  # added up to half a minute of every make test.
  local f pid pids=() i
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || continue
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid")
  done
  for ((i = 0; i < 50; i++)); do
    local left=0
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then left=1; break; fi
    done
    ((left)) || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  rm -f "$DIR"/*.pid
  rm -rf "$DIR"
  log "stopped"
}

case "${1:-}" in
install) shift; cmd_install "$@" ;;
apt) shift; mkdir -p "$TOOLS"; apt_install "$@" ;;
start) shift; cmd_start "$@" ;;
stop) shift; cmd_stop "$@" ;;
down) shift; cmd_down "$@" ;;
up) shift; cmd_up "$@" ;;
env)
  [ -n "${OPENETL_SERVERS_DIR:-}" ] || die "env: OPENETL_SERVERS_DIR is not set"
  cat "$OPENETL_SERVERS_DIR/env"
  ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
