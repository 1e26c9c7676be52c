# shellcheck shell=bash
# A Confluent-compatible schema registry for source/kafka's registry
# tests: Apicurio Registry (io.apicurio:apicurio-registry-app, the
# Quarkus fast-jar distribution its Maven release attaches as
# classifier "all", tar.gz), whose ccompat API speaks the Confluent Schema
# Registry's REST protocol at /apis/ccompat/v7. Sourced by
# scripts/servers.sh, which calls install_registry, start_registry,
# ready_registry and env_registry (see its header). Storage is the
# registry's default in-memory database: every start is empty.
#
# Exports:
#   OPENETL_TEST_REGISTRY   the ccompat API's URL, http://127.0.0.1:PORT/apis/ccompat/v7

ALL_SERVICES+=(registry)
# Quarkus opens the port only once started: about 15 s, 40 s on a busy
# machine.
WAIT_PORT_SECS[registry]=180

REGISTRY_VERSION=3.3.3
REGISTRY_DIR="$TOOLS/apicurio-registry/$REGISTRY_VERSION"

# registry_java prints a java of version 21 or later (Apicurio Registry
# 3.3 is built for 21): $OPENETL_REGISTRY_JAVA, the java on PATH, or a
# JDK under /usr/lib/jvm (this machine's Temurin 25).
registry_java() {
  local j v
  for j in "${OPENETL_REGISTRY_JAVA:-}" "$(command -v java || true)" /usr/lib/jvm/*/bin/java; do
    [ -n "$j" ] && [ -x "$j" ] || continue
    v=$("$j" -XshowSettings:properties -version 2>&1 | awk -F' = ' '/java.specification.version/ {print $2}')
    if [ -n "$v" ] && [ "${v%%.*}" -ge 21 ] 2>/dev/null; then
      echo "$j"
      return 0
    fi
  done
  return 1
}

# The distribution (a 160 MB tar.gz) fetched by mvn and unpacked into
# $REGISTRY_DIR/app; a marker file says it finished. Needs mvn, and java
# 21 or later to run.
install_registry() {
  registry_java >/dev/null || die "registry: Apicurio Registry $REGISTRY_VERSION needs java 21 or later (set OPENETL_REGISTRY_JAVA)"
  [ -f "$REGISTRY_DIR/.complete" ] && return 0
  command -v mvn >/dev/null || die "registry: mvn is needed to fetch Apicurio Registry from Maven Central"
  log "installing Apicurio Registry $REGISTRY_VERSION from Maven Central"
  local t0=$SECONDS
  rm -rf "$REGISTRY_DIR"
  mkdir -p "$REGISTRY_DIR/app"
  mvn -q -B dependency:copy -Dartifact="io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all" \
    -DoutputDirectory="$REGISTRY_DIR" >&2 ||
    die "registry: mvn could not fetch io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all"
  tar -xzf "$REGISTRY_DIR/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz" -C "$REGISTRY_DIR/app" ||
    die "registry: could not unpack the distribution"
  rm -f "$REGISTRY_DIR/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz"
  [ -f "$REGISTRY_DIR/app/quarkus-run.jar" ] || die "registry: the distribution has no quarkus-run.jar"
  touch "$REGISTRY_DIR/.complete"
  log "installed Apicurio Registry in $((SECONDS - t0))s"
}

start_registry() {
  local port mport
  port=$(free_port)
  mport=$(free_port)
  echo "$port" >"$DIR/registry.port"
  # The management interface (health, metrics) is built in; by default it
  # binds 0.0.0.0:9000, which a second registry (or anything else) holds.
  launch registry "$(registry_java)" -Xms64m -Xmx512m -Djava.awt.headless=true \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mport" \
    -Dquarkus.log.level=WARN -Dquarkus.http.access-log.enabled=false \
    -jar "$REGISTRY_DIR/app/quarkus-run.jar"
}

# The port answers once Quarkus started; ask the ccompat API for the
# schema types it serves.
ready_registry() {
  local port i
  port=$(cat "$DIR/registry.port")
  for ((i = 0; i < 1800; i++)); do
    curl -sf "http://127.0.0.1:$port/apis/ccompat/v7/schemas/types" >/dev/null 2>&1 && return 0
    alive registry || die "registry exited during startup: $(tail -5 "$DIR/registry.log")"
    sleep 0.1
  done
  die "registry did not answer within 180s; see $DIR/registry.log"
}

env_registry() {
  cat <<EOF
export OPENETL_TEST_REGISTRY='http://127.0.0.1:$(cat "$DIR/registry.port")/apis/ccompat/v7'
EOF
}
