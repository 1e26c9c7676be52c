# shellcheck shell=bash
# The Apache Iceberg REST catalog test server, for sink/iceberg's REST
# tests. Sourced by scripts/servers.sh, which calls install_iceberg_rest,
# start_iceberg_rest, ready_iceberg_rest and env_iceberg_rest (see its
# header).
#
# The server is Iceberg's own: the REST catalog servlet and adapter from
# iceberg-core's test jar, behind RESTServerCatalogAdapter from the
# iceberg-open-api test fixtures (org.apache.iceberg:iceberg-open-api:
# $ICEBERG_REST_VERSION:test-fixtures, the server the apache/iceberg-rest-
# fixture image runs), all from Maven Central, on Java 17. It serves a
# JdbcCatalog on a SQLite file in $DIR/iceberg_rest with a file warehouse
# next to it, so clients (iceberg-go, pyiceberg) write data files and read
# metadata on the local disk. RESTCatalogServer's own main binds every
# interface; the launcher below (compiled at install, in the fixtures'
# package) builds the same catalog, adapter and servlet and binds
# 127.0.0.1 only.
#
# Exports:
#   OPENETL_TEST_ICEBERG_REST            the catalog's URI, http://127.0.0.1:PORT
#   OPENETL_TEST_ICEBERG_REST_WAREHOUSE  its warehouse, file:///...

ALL_SERVICES+=(iceberg_rest)

ICEBERG_REST_VERSION=1.10.0
ICEBERG_REST_DIR="$TOOLS/iceberg-rest/$ICEBERG_REST_VERSION"

# The jars (the fixtures, iceberg-core and its test jar, Jetty 11,
# sqlite-jdbc, the shaded Hadoop client for HadoopFileIO, slf4j-simple)
# copied by mvn from a pom written here into $ICEBERG_REST_DIR/libs, then
# the launcher compiled into $ICEBERG_REST_DIR/classes; a marker file says
# both finished. Needs java and javac (17+) and mvn. About 80 MB.
install_iceberg_rest() {
  [ -f "$ICEBERG_REST_DIR/.complete" ] && return 0
  command -v mvn >/dev/null || die "iceberg_rest: mvn is needed to fetch the server from Maven Central"
  command -v javac >/dev/null || die "iceberg_rest: a JDK (17 or later, with javac) is needed to run the server"
  log "installing the Iceberg REST catalog test server $ICEBERG_REST_VERSION from Maven Central"
  local t0=$SECONDS
  rm -rf "$ICEBERG_REST_DIR"
  mkdir -p "$ICEBERG_REST_DIR/src/org/apache/iceberg/rest" "$ICEBERG_REST_DIR/classes"
  cat >"$ICEBERG_REST_DIR/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/services/iceberg_rest.sh: the Iceberg REST catalog
     test server's classpath. Nothing here is built. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>org.openetl.test</groupId>
  <artifactId>iceberg-rest</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <!-- RESTCatalogServer, RESTServerCatalogAdapter, RCKUtils; its pom
         lists no dependencies (Gradle test fixtures), so they follow. -->
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-open-api</artifactId>
      <version>$ICEBERG_REST_VERSION</version><classifier>test-fixtures</classifier></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId>
      <version>$ICEBERG_REST_VERSION</version></dependency>
    <!-- RESTCatalogAdapter and RESTCatalogServlet. -->
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-core</artifactId>
      <version>$ICEBERG_REST_VERSION</version><classifier>tests</classifier></dependency>
    <dependency><groupId>org.eclipse.jetty</groupId><artifactId>jetty-servlet</artifactId>
      <version>11.0.25</version></dependency>
    <dependency><groupId>org.xerial</groupId><artifactId>sqlite-jdbc</artifactId>
      <version>3.50.3.0</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-client-api</artifactId>
      <version>3.4.1</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-client-runtime</artifactId>
      <version>3.4.1</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId>
      <version>2.0.17</version></dependency>
  </dependencies>
</project>
EOF
  cat >"$ICEBERG_REST_DIR/src/org/apache/iceberg/rest/LoopbackRESTCatalogServer.java" <<'EOF'
package org.apache.iceberg.rest;

import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/**
 * RESTCatalogServer's server, bound to 127.0.0.1: the catalog configured
 * from CATALOG_* environment variables as RCKUtils reads them
 * (CATALOG_WAREHOUSE, CATALOG_URI, CATALOG_REST_PORT, ...).
 */
public class LoopbackRESTCatalogServer {
  public static void main(String[] args) throws Exception {
    Map<String, String> conf = new HashMap<>(RCKUtils.environmentCatalogConfig());
    conf.putIfAbsent("catalog-impl", JdbcCatalog.class.getName());
    conf.putIfAbsent("jdbc.schema-version", "V1");
    String name = conf.getOrDefault("catalog.name", "rest_backend");
    Catalog catalog = CatalogUtil.buildIcebergCatalog(name, conf, new Configuration());
    RESTCatalogServlet servlet = new RESTCatalogServlet(
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, conf)));
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(servlet), "/*");
    context.insertHandler(new GzipHandler());
    Server server = new Server();
    ServerConnector http = new ServerConnector(server);
    http.setHost("127.0.0.1");
    http.setPort(Integer.parseInt(conf.get("rest.port")));
    server.addConnector(http);
    server.setHandler(context);
    server.start();
    System.out.println("LoopbackRESTCatalogServer listening on 127.0.0.1:" + http.getLocalPort());
    server.join();
  }
}
EOF
  mvn -q -B -f "$ICEBERG_REST_DIR/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$ICEBERG_REST_DIR/libs" >&2 ||
    die "iceberg_rest: mvn could not fetch the server's jars"
  javac -nowarn -d "$ICEBERG_REST_DIR/classes" -cp "$ICEBERG_REST_DIR/libs/*" \
    "$ICEBERG_REST_DIR/src/org/apache/iceberg/rest/LoopbackRESTCatalogServer.java" >&2 ||
    die "iceberg_rest: could not compile the launcher"
  touch "$ICEBERG_REST_DIR/.complete"
  log "installed the Iceberg REST catalog server in $((SECONDS - t0))s"
}

# A JdbcCatalog on $DIR/iceberg_rest/catalog.db (one connection: the
# tests commit from several goroutines and SQLite serializes writers
# anyway) with its warehouse in $DIR/iceberg_rest/warehouse.
start_iceberg_rest() {
  local port data=$DIR/iceberg_rest
  port=$(free_port)
  echo "$port" >"$DIR/iceberg_rest.port"
  rm -rf "$data"
  mkdir -p "$data/warehouse"
  CATALOG_WAREHOUSE="file://$data/warehouse" CATALOG_URI="jdbc:sqlite:$data/catalog.db" \
    CATALOG_CLIENTS=1 CATALOG_REST_PORT=$port \
    launch iceberg_rest java -Xms64m -Xmx512m -Djava.awt.headless=true \
    -cp "$ICEBERG_REST_DIR/classes:$ICEBERG_REST_DIR/libs/*" org.apache.iceberg.rest.LoopbackRESTCatalogServer
}

# The port answers once Jetty started; ask the catalog for its config.
ready_iceberg_rest() {
  local port i
  port=$(cat "$DIR/iceberg_rest.port")
  for ((i = 0; i < 600; i++)); do
    curl -sf "http://127.0.0.1:$port/v1/config" >/dev/null 2>&1 && return 0
    alive iceberg_rest || die "iceberg_rest exited during startup: $(tail -5 "$DIR/iceberg_rest.log")"
    sleep 0.1
  done
  die "iceberg_rest did not answer within 60s; see $DIR/iceberg_rest.log"
}

env_iceberg_rest() {
  cat <<EOF
export OPENETL_TEST_ICEBERG_REST='http://127.0.0.1:$(cat "$DIR/iceberg_rest.port")'
export OPENETL_TEST_ICEBERG_REST_WAREHOUSE='file://$DIR/iceberg_rest/warehouse'
EOF
}
