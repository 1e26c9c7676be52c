# shellcheck shell=bash
# A ClickHouse cluster for sink/clickhouse's cluster tests, sourced by
# scripts/servers.sh: Debian's ZooKeeper (the `zookeeper` package, run
# with java as one standalone server) and four of the ClickHouse servers
# the clickhouse service runs (Debian's 18.16), on free loopback ports,
# configured as one cluster "openetl" of 2 shards x 2 replicas: each
# server knows the cluster (remote_servers), ZooKeeper, its own macros
# {shard} (01, 02) and {replica} (s1r1, s1r2, s2r1, s2r2), and the
# distributed DDL queue, so ReplicatedMergeTree, ON CLUSTER and
# Distributed tables work. Everything lives in $DIR/chcluster.
#
# The service is one process group (a small supervisor shell that starts
# the five servers and waits), so servers.sh stops it whole. A test that
# stops one replica kills the PID in $DIR/chcluster/REPLICA.pid; the
# command that starts it again is in $DIR/chcluster/REPLICA.run. A
# replica started again runs outside the group: the test starts it in a
# session of its own (setsid) and writes its PID to
# $DIR/chcluster-REPLICA.pid as well, where servers.sh stop finds it.
#
# Exports:
#   OPENETL_TEST_CHCLUSTER_NAME       the cluster's name in remote_servers
#   OPENETL_TEST_CHCLUSTER_SHARDS     native addresses, shards separated by
#                                     ";", a shard's replicas by ","
#                                     (s1r1,s1r2;s2r1,s2r2)
#   OPENETL_TEST_CHCLUSTER_REPLICAS   the replicas' names in that order
#   OPENETL_TEST_CHCLUSTER_DIR        the directory of the pid and run files
#   OPENETL_TEST_CHCLUSTER_ZOOKEEPER  host:port of ZooKeeper
#   OPENETL_TEST_CLICKHOUSE_CLIENT    the clickhouse-client binary

ALL_SERVICES+=(chcluster)
WAIT_PORT_SECS[chcluster]=120

CHC_ZK_JAR=/usr/share/java/zookeeper.jar
CHC_REPLICAS=(s1r1 s1r2 s2r1 s2r2)
CHC_NAME=openetl

# Debian's clickhouse-server, clickhouse-client and zookeeper (whose jar
# names its dependencies' jars in its manifest), only when missing.
debs_chcluster() {
  local want=()
  [ -x /usr/sbin/clickhouse-server ] && [ -x /usr/bin/clickhouse-client ] || want+=(clickhouse-server clickhouse-client)
  [ -f "$CHC_ZK_JAR" ] || want+=(zookeeper)
  echo "${want[@]}"
}

install_chcluster() {
  [ -x /usr/sbin/clickhouse-server ] && [ -x /usr/bin/clickhouse-client ] ||
    die "chcluster: clickhouse-server or clickhouse-client is missing (Debian's packages of those names)"
  [ -f "$CHC_ZK_JAR" ] || die "chcluster: $CHC_ZK_JAR is missing (Debian's zookeeper package)"
  command -v java >/dev/null || die "chcluster: java is needed to run ZooKeeper"
}

# chc_config REPLICA SHARD: the config of one server, every path under
# $DIR/chcluster/REPLICA, its ports from $DIR/chcluster/ports.
chc_config() {
  local r=$1 shard=$2 data=$DIR/chcluster/$1 ports
  # shellcheck source=/dev/null
  . "$DIR/chcluster/ports"
  mkdir -p "$data/data" "$data/tmp" "$data/user_files" "$data/format_schemas" "$data/log"
  # Same users as the clickhouse service: default, no password, loopback.
  cat >"$data/users.xml" <<'EOF'
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage><load_balancing>in_order</load_balancing></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
EOF
  local tcp=CHC_TCP_$r http=CHC_HTTP_$r isrv=CHC_ISRV_$r
  cat >"$data/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$data/log/server.log</log><errorlog>$data/log/server.err.log</errorlog><size>100M</size><count>2</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>${!tcp}</tcp_port>
  <http_port>${!http}</http_port>
  <interserver_http_port>${!isrv}</interserver_http_port>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <max_connections>256</max_connections>
  <max_concurrent_queries>100</max_concurrent_queries>
  <keep_alive_timeout>3</keep_alive_timeout>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <mark_cache_size>67108864</mark_cache_size>
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
  <zookeeper>
    <node><host>127.0.0.1</host><port>$CHC_ZK</port></node>
    <session_timeout_ms>10000</session_timeout_ms>
  </zookeeper>
  <macros><shard>$shard</shard><replica>$r</replica></macros>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
  <remote_servers>
    <$CHC_NAME>
      <shard><internal_replication>true</internal_replication>
        <replica><host>127.0.0.1</host><port>$CHC_TCP_s1r1</port></replica>
        <replica><host>127.0.0.1</host><port>$CHC_TCP_s1r2</port></replica>
      </shard>
      <shard><internal_replication>true</internal_replication>
        <replica><host>127.0.0.1</host><port>$CHC_TCP_s2r1</port></replica>
        <replica><host>127.0.0.1</host><port>$CHC_TCP_s2r2</port></replica>
      </shard>
    </$CHC_NAME>
  </remote_servers>
</yandex>
EOF
  echo "exec /usr/sbin/clickhouse-server --config-file=$data/config.xml >>$data/log/stdout.log 2>&1" >"$DIR/chcluster/$r.run"
}

start_chcluster() {
  local c=$DIR/chcluster r p
  rm -rf "$c"
  mkdir -p "$c/zk/data"
  {
    echo "CHC_ZK=$(free_port)"
    for r in "${CHC_REPLICAS[@]}"; do
      echo "CHC_TCP_$r=$(free_port)"
      echo "CHC_HTTP_$r=$(free_port)"
      echo "CHC_ISRV_$r=$(free_port)"
    done
  } >"$c/ports"
  # shellcheck source=/dev/null
  . "$c/ports"
  # The first replica's native port is the service's port: wait_port
  # polls it, ready_chcluster asks all of them.
  echo "$CHC_TCP_s1r1" >"$DIR/chcluster.port"
  cat >"$c/zk/zoo.cfg" <<EOF
tickTime=500
initLimit=10
syncLimit=5
dataDir=$c/zk/data
clientPort=$CHC_ZK
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
forceSync=no
EOF
  echo "exec java -Xms64m -Xmx256m -XX:+UseSerialGC -Djava.awt.headless=true -Dzookeeper.jmx.log4j.disable=true -cp $CHC_ZK_JAR org.apache.zookeeper.server.quorum.QuorumPeerMain $c/zk/zoo.cfg >>$c/zk/zk.log 2>&1" >"$c/zk.run"
  chc_config s1r1 01
  chc_config s1r2 01
  chc_config s2r1 02
  chc_config s2r2 02
  # The supervisor: starts ZooKeeper and the servers (they retry
  # ZooKeeper until it answers), writes their PIDs, and waits; killing
  # its process group stops them all.
  cat >"$c/supervise.sh" <<EOF
#!/usr/bin/env bash
cd "$c"
for r in zk ${CHC_REPLICAS[*]}; do
  bash "$c/\$r.run" &
  echo \$! >"$c/\$r.pid"
done
wait
EOF
  launch chcluster bash "$c/supervise.sh"
}

# Every server answers, and ZooKeeper works: each creates a replicated
# table of its shard (the replicas register in ZooKeeper) and drops it.
ready_chcluster() {
  local c=$DIR/chcluster r i port ok
  # shellcheck source=/dev/null
  . "$c/ports"
  for r in "${CHC_REPLICAS[@]}"; do
    port=CHC_TCP_$r
    ok=
    for ((i = 0; i < 1200; i++)); do
      if /usr/bin/clickhouse-client --host 127.0.0.1 --port "${!port}" -q 'SELECT 1' >/dev/null 2>&1; then
        ok=1
        break
      fi
      alive chcluster || die "chcluster exited during startup: $(tail -5 "$c/$r/log/server.err.log" 2>/dev/null)"
      sleep 0.1
    done
    [ -n "$ok" ] || die "chcluster: $r did not answer queries within 120s; see $c/$r/log/server.err.log"
  done
  for r in "${CHC_REPLICAS[@]}"; do
    port=CHC_TCP_$r
    for ((i = 0; ; i++)); do
      /usr/bin/clickhouse-client --host 127.0.0.1 --port "${!port}" --multiquery -q \
        "CREATE TABLE IF NOT EXISTS default.openetl_ready (x UInt8) ENGINE = ReplicatedMergeTree('/clickhouse/openetl_ready/{shard}', '{replica}') ORDER BY x;
         DROP TABLE default.openetl_ready" >"$c/ready.out" 2>&1 && break
      ((i < 600)) || die "chcluster: $r can't use ZooKeeper: $(tail -3 "$c/ready.out")"
      sleep 0.1
    done
  done
}

env_chcluster() {
  local c=$DIR/chcluster
  # shellcheck source=/dev/null
  . "$c/ports"
  cat <<EOF
export OPENETL_TEST_CHCLUSTER_NAME='$CHC_NAME'
export OPENETL_TEST_CHCLUSTER_SHARDS='127.0.0.1:$CHC_TCP_s1r1,127.0.0.1:$CHC_TCP_s1r2;127.0.0.1:$CHC_TCP_s2r1,127.0.0.1:$CHC_TCP_s2r2'
export OPENETL_TEST_CHCLUSTER_REPLICAS='s1r1,s1r2;s2r1,s2r2'
export OPENETL_TEST_CHCLUSTER_DIR='$c'
export OPENETL_TEST_CHCLUSTER_ZOOKEEPER='127.0.0.1:$CHC_ZK'
export OPENETL_TEST_CLICKHOUSE_CLIENT='/usr/bin/clickhouse-client'
EOF
}
