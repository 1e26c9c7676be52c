# shellcheck shell=bash
# A PostgreSQL 17 primary and a streaming standby of it, for
# source/postgres's failover-slot and standby tests. Sourced by
# scripts/servers.sh (install_NAME, start_NAME, ready_NAME, env_NAME for
# NAME pg17ha; see its header). The binaries are the pg17 service's
# (scripts/services/pgmatrix.sh, from Maven Central), installed under the
# same lock.
#
# The zonky bundle has no pg_basebackup, so the standby is a copy of the
# primary's data directory taken before the primary first starts (a
# cleanly shut down cluster is a valid base backup): initdb, then the
# physical slot the standby streams from (standby1, made in single-user
# mode so no client is needed), then the copy, less that slot, with
# standby.signal. Both then start at once; the standby's walreceiver
# tries again every 100 ms until the primary listens.
#
#   primary  wal_level=logical, synchronized_standby_slots=standby1 (a
#            failover slot's consumer never gets WAL the standby lacks)
#   standby  primary_slot_name=standby1, hot_standby_feedback=on,
#            sync_replication_slots=on (it keeps copies of the primary's
#            failover slots), wal_level=logical (logical decoding on the
#            standby)
#
# Tests read OPENETL_TEST_PG17HA_PRIMARY_DSN and
# OPENETL_TEST_PG17HA_STANDBY_DSN. A test that promotes the standby
# starts a pair of its own (testutil.PrivateServer(t, "pg17ha")). The
# primary's process is pg17ha (its pid file and port), the standby's
# pg17ha-standby; servers.sh stop stops both. No run_pg17ha: servers.sh
# down/up don't apply to the pair.

ALL_SERVICES+=(pg17ha)

install_pg17ha() {
  # The pg17 service's install, under its lock: a concurrent start of
  # pg17 unpacks into the same directory.
  (
    exec 6>"$TOOLS/.install-pg17.lock"
    flock 6
    pgm_install pg17
  )
}

# pgha_cmd NAME prints the command that runs the bundle's bin/NAME as
# the postgres user (for launch, which can't run a function; the paths
# have no spaces); pgha NAME ARGS... runs it.
pgha_cmd() {
  local install=$DIR/pg17ha/install
  echo runuser -u postgres -- env "LD_LIBRARY_PATH=$(pgm_libpath pg17 "$install")" "$(pgm_bin pg17 "$install")/$1"
}
pgha() {
  local cmd
  read -ra cmd <<<"$(pgha_cmd "$1")"
  shift
  "${cmd[@]}" "$@"
}

# pgha_die stops the standby (servers.sh stops only the primary of a
# failed start) and fails.
pgha_die() {
  stop_one pg17ha-standby
  die "$@"
}

start_pg17ha() {
  local d=$DIR/pg17ha port sport
  stop_one pg17ha-standby # a start on another port: the first one's
  port=$(free_port)
  sport=$(free_port)
  echo "$port" >"$DIR/pg17ha.port"
  echo "$sport" >"$DIR/pg17ha-standby.port"
  rm -rf "$d"
  mkdir -p "$d"
  chmod 711 "$DIR"
  cp -al "$(pgm_root pg17)" "$d/install" 2>/dev/null || {
    rm -rf "$d/install"
    cp -a "$(pgm_root pg17)" "$d/install"
  }
  chown postgres: "$d"
  pgha initdb -D "$d/primary" -U postgres -A trust --no-sync -E UTF8 --locale=C.UTF-8 >"$DIR/pg17ha.initdb.log" 2>&1 ||
    die "pg17ha: initdb failed: $(tail -3 "$DIR/pg17ha.initdb.log")"
  echo "SELECT pg_create_physical_replication_slot('standby1', true);" |
    pgha postgres --single -D "$d/primary" -c wal_level=logical -c fsync=off postgres >"$DIR/pg17ha.slot.log" 2>&1 ||
    die "pg17ha: could not create the standby's slot: $(tail -3 "$DIR/pg17ha.slot.log")"
  runuser -u postgres -- cp -a "$d/primary" "$d/standby"
  # In postgresql.auto.conf, so ALTER SYSTEM can change it (a test turns
  # it off).
  echo "synchronized_standby_slots = 'standby1'" >>"$d/primary/postgresql.auto.conf"
  rm -rf "$d/standby/pg_replslot/standby1"
  runuser -u postgres -- touch "$d/standby/standby.signal"
  # Where pg_basebackup -R puts them, so ALTER SYSTEM can change them (a
  # test cuts the standby off with primary_conninfo = '').
  cat >>"$d/standby/postgresql.auto.conf" <<EOF
primary_conninfo = 'host=127.0.0.1 port=$port user=postgres dbname=postgres application_name=standby1'
primary_slot_name = 'standby1'
EOF
  local cmd
  read -ra cmd <<<"$(pgha_cmd postgres)"
  launch pg17ha "${cmd[@]}" -D "$d/primary" -p "$port" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories="$d" -c wal_level=logical \
    -c max_replication_slots=20 -c max_wal_senders=20 -c fsync=off
  # The standby starts once the primary takes connections: its slot
  # sync worker, failing to connect, would try again only after 10 s.
  pgha_wait pg17ha 'database system is ready to accept connections'
  launch pg17ha-standby "${cmd[@]}" -D "$d/standby" -p "$sport" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories="$d" -c wal_level=logical \
    -c max_replication_slots=20 -c max_wal_senders=20 -c fsync=off \
    -c hot_standby_feedback=on -c sync_replication_slots=on -c wal_retrieve_retry_interval=100ms
}

# pgha_wait NAME LINE waits up to 60 s for LINE in NAME's log (the
# bundle has no pg_isready), failing if NAME exits first.
pgha_wait() {
  local i
  for ((i = 0; i < 600; i++)); do
    grep -q "$2" "$DIR/$1.log" 2>/dev/null && return 0
    alive "$1" || pgha_die "$1 exited during startup: $(tail -5 "$DIR/$1.log")"
    sleep 0.1
  done
  pgha_die "$1: no \"$2\" within 60s; see $DIR/$1.log"
}

# Ready when the standby streams from the primary and its slot sync
# worker runs.
ready_pg17ha() {
  pgha_wait pg17ha-standby 'started streaming WAL from primary'
  pgha_wait pg17ha-standby 'slot sync worker started'
}

env_pg17ha() {
  cat <<EOF
export OPENETL_TEST_PG17HA_PRIMARY_DSN='postgres://postgres@127.0.0.1:$(cat "$DIR/pg17ha.port")/postgres?sslmode=disable'
export OPENETL_TEST_PG17HA_STANDBY_DSN='postgres://postgres@127.0.0.1:$(cat "$DIR/pg17ha-standby.port")/postgres?sslmode=disable'
EOF
}
