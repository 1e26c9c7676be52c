# shellcheck shell=bash
# MariaDB 10.11 from Debian (mariadb-server), for source/mysql's tests.
# Sourced by scripts/servers.sh, which calls install_mariadb,
# start_mariadb, ready_mariadb and env_mariadb (see its header).
#
# A fresh data directory in $DIR/mariadb, owned by the mysql user, with
# the binary log in row format, full row images and full row metadata
# (what source/mysql requires), GTIDs as MariaDB always has them, and a
# user etl@127.0.0.1 with every privilege (--skip-name-resolve makes
# root@localhost unusable over TCP). Tests read OPENETL_TEST_MARIADB_DSN
# (user:password@127.0.0.1:PORT/etl) and create their own tables in the
# database etl.

ALL_SERVICES+=(mariadb)

MARIADB_USER=etl
MARIADB_PASSWORD=etl-secret
MARIADB_DB=etl

# Debian's mariadb-server and mariadb-client, only when the server is
# missing; servers.sh installs them in its one apt-get run (which also
# keeps the package from starting a system server).
debs_mariadb() {
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || echo mariadb-server mariadb-client
}

install_mariadb() {
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
    die "mariadb: mariadbd is missing (Debian's mariadb-server provides it)"
}

mariadb_bin() {
  local b
  for b in "$@"; do
    if command -v "$b" >/dev/null 2>&1; then
      command -v "$b"
      return
    fi
    [ -x "/usr/sbin/$b" ] && { echo "/usr/sbin/$b"; return; }
    [ -x "/usr/bin/$b" ] && { echo "/usr/bin/$b"; return; }
  done
  die "mariadb: none of $* found"
}

start_mariadb() {
  local port data=$DIR/mariadb
  port=$(free_port)
  echo "$port" >"$DIR/mariadb.port"
  rm -rf "$data"
  mkdir -p "$data"
  chmod 711 "$DIR"
  chown mysql: "$data"
  runuser -u mysql -- "$(mariadb_bin mariadb-install-db mysql_install_db)" --no-defaults --datadir="$data/data" \
    --user=mysql --auth-root-authentication-method=normal --skip-test-db >"$DIR/mariadb.install.log" 2>&1 ||
    die "mariadb: mariadb-install-db failed: $(tail -3 "$DIR/mariadb.install.log")"
  run_mariadb
}

# run_mariadb starts the server start_mariadb prepared, on its port from
# its data (servers.sh up runs it again after down).
run_mariadb() {
  local port data=$DIR/mariadb
  port=$(cat "$DIR/mariadb.port")
  # In the foreground under launch, so stop_one stops it by its process
  # group. innodb_flush_log_at_trx_commit=2 and sync_binlog=0: test data,
  # no fsync per commit (a SIGKILLed client never loses committed rows;
  # only a machine crash could).
  # A temp dir of its own: in the shared /tmp, its internal temp tables'
  # files were once reported missing on delete while other servers and
  # test runs used it ("Error on delete of '/tmp/#sql-temptable-...'").
  mkdir -p "$data/tmp"
  chown mysql: "$data/tmp"
  launch mariadb runuser -u mysql -- "$(mariadb_bin mariadbd mysqld)" --no-defaults --datadir="$data/data" \
    --tmpdir="$data/tmp" --user=mysql --socket="$data/s.sock" --pid-file="$data/mariadbd.pid" --port="$port" \
    --bind-address=127.0.0.1 --skip-name-resolve --server-id=1 --log-bin="$data/bin" \
    --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL \
    --innodb-flush-log-at-trx-commit=2 --sync-binlog=0 --innodb-buffer-pool-size=256M \
    --max-connections=500 --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci
}

ready_mariadb() {
  local data=$DIR/mariadb i client
  client=$(mariadb_bin mariadb mysql)
  for ((i = 0; i < 600; i++)); do
    if "$client" --no-defaults -S "$data/s.sock" -u root -e 'SELECT 1' >/dev/null 2>&1; then
      "$client" --no-defaults -S "$data/s.sock" -u root -e "
CREATE DATABASE IF NOT EXISTS $MARIADB_DB;
CREATE USER IF NOT EXISTS '$MARIADB_USER'@'127.0.0.1' IDENTIFIED BY '$MARIADB_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO '$MARIADB_USER'@'127.0.0.1' WITH GRANT OPTION;" >&2 ||
        die "mariadb: could not create the test user"
      return 0
    fi
    alive mariadb || die "mariadb exited during startup: $(tail -5 "$DIR/mariadb.log")"
    sleep 0.1
  done
  die "mariadb did not accept connections within 60s; see $DIR/mariadb.log"
}

env_mariadb() {
  cat <<EOF
export OPENETL_TEST_MARIADB_DSN='$MARIADB_USER:$MARIADB_PASSWORD@127.0.0.1:$(cat "$DIR/mariadb.port")/$MARIADB_DB'
EOF
}
