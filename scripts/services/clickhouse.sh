# ClickHouse for scripts/servers.sh (sourced by it): Debian's
# clickhouse-server and clickhouse-client (18.16, the only ClickHouse the
# registries here serve), one server on two free loopback ports (native
# protocol and HTTP), every path in $DIR/clickhouse, user "default" without
# a password.
#
# Exports:
#   OPENETL_TEST_CLICKHOUSE_ADDR    host:port of the native protocol
#   OPENETL_TEST_CLICKHOUSE_HTTP    http://host:port/ of the HTTP endpoint
#   OPENETL_TEST_CLICKHOUSE_CLIENT  the clickhouse-client binary
#
# Tests that need a *current* ClickHouse (DateTime64, insert deduplication
# tokens, ...) read OPENETL_TEST_CLICKHOUSE instead, which this script never
# sets: point it at a modern server by hand.

ALL_SERVICES+=(clickhouse)

CH_SERVER=/usr/sbin/clickhouse-server
CH_CLIENT=/usr/bin/clickhouse-client

# Debian's packages, only when a binary is missing; servers.sh installs
# them in its one apt-get run.
debs_clickhouse() { [ -x "$CH_SERVER" ] && [ -x "$CH_CLIENT" ] || echo clickhouse-server clickhouse-client; }

install_clickhouse() {
  [ -x "$CH_SERVER" ] && [ -x "$CH_CLIENT" ] ||
    die "clickhouse: $CH_SERVER or $CH_CLIENT is missing (Debian's clickhouse-server and clickhouse-client provide them)"
}

# A config with every path under $DIR/clickhouse, listening on 127.0.0.1
# only; the packaged /etc/clickhouse-server is not read. Runs as root (CI
# does; the server allows it).
start_clickhouse() {
  local port http data=$DIR/clickhouse
  port=$(free_port)
  http=$(free_port)
  echo "$port" >"$DIR/clickhouse.port"
  echo "$http" >"$DIR/clickhouse.http_port"
  rm -rf "$data"
  mkdir -p "$data/data" "$data/tmp" "$data/user_files" "$data/format_schemas" "$data/log"
  cat >"$data/users.xml" <<'EOF'
<?xml version="1.0"?>
<yandex>
  <profiles>
    <default>
      <max_memory_usage>4000000000</max_memory_usage>
      <load_balancing>random</load_balancing>
    </default>
  </profiles>
  <users>
    <default>
      <password></password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas>
    <default>
      <interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval>
    </default>
  </quotas>
</yandex>
EOF
  cat >"$data/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>$data/log/server.log</log>
    <errorlog>$data/log/server.err.log</errorlog>
    <size>100M</size>
    <count>2</count>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>$port</tcp_port>
  <http_port>$http</http_port>
  <max_connections>1024</max_connections>
  <max_concurrent_queries>200</max_concurrent_queries>
  <keep_alive_timeout>3</keep_alive_timeout>
  <uncompressed_cache_size>268435456</uncompressed_cache_size>
  <mark_cache_size>268435456</mark_cache_size>
  <path>$data/data/</path>
  <tmp_path>$data/tmp/</tmp_path>
  <user_files_path>$data/user_files/</user_files_path>
  <format_schema_path>$data/format_schemas/</format_schema_path>
  <users_config>$data/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
  <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
  <max_session_timeout>3600</max_session_timeout>
  <default_session_timeout>60</default_session_timeout>
</yandex>
EOF
  launch clickhouse "$CH_SERVER" --config-file="$data/config.xml"
}

# The port may answer before the server takes queries: ask it.
ready_clickhouse() {
  local port i
  port=$(cat "$DIR/clickhouse.port")
  for ((i = 0; i < 600; i++)); do
    "$CH_CLIENT" --host 127.0.0.1 --port "$port" -q 'SELECT 1' >/dev/null 2>&1 && return 0
    alive clickhouse || die "clickhouse exited during startup: $(tail -5 "$DIR/clickhouse.log") $(tail -5 "$DIR/clickhouse/log/server.err.log" 2>/dev/null)"
    sleep 0.1
  done
  die "clickhouse did not answer queries within 60s; see $DIR/clickhouse/log/server.err.log"
}

env_clickhouse() {
  cat <<EOF
export OPENETL_TEST_CLICKHOUSE_ADDR='127.0.0.1:$(cat "$DIR/clickhouse.port")'
export OPENETL_TEST_CLICKHOUSE_HTTP='http://127.0.0.1:$(cat "$DIR/clickhouse.http_port")/'
export OPENETL_TEST_CLICKHOUSE_CLIENT='$CH_CLIENT'
EOF
}
