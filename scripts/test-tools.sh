#!/usr/bin/env bash
# Installs the independent readers the tests use to check what was
# written (pyarrow for Parquet, pyiceberg with its SQL catalog for
# Iceberg), dbt with its Postgres adapter (examples/dbt) and an
# independent Kafka producer (confluent-kafka with its Avro, Protobuf and
# JSON Schema serializers), DuckDB with its iceberg extension and Spark
# with Iceberg's runtime, into a virtualenv under the cache directory.
# Idempotent: a second run installs nothing. Concurrent runs wait for
# each other. Prints the virtualenv's python; dbt is beside it.
set -euo pipefail
cache="${OPENETL_CACHE:-$HOME/.cache/openetl}"
venv="$cache/venv"
want_pyarrow=26.0.1
want_pyiceberg=0.12.0
# dbt-core 1.12 needs a package whose build downloads a wheel from outside
# the registry: 1.11 is the newest that installs from PyPI alone.
want_dbt_core=1.11.16
want_dbt_postgres=1.11.0
want_dbt_adapters=1.24.5
want_dbt_common=1.39.0
mkdir -p "$cache"
exec 9>"$cache/venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
pip_install() {
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$@" >&2
}
have=$("$venv/bin/python" -c 'import pyarrow; print(pyarrow.__version__)' 2>/dev/null || true)
if [ "$have" != "$want_pyarrow" ]; then
  pip_install "pyarrow==$want_pyarrow"
fi
# pyiceberg reads the tables sink/iceberg writes, over the same SQLite
# catalog; sqlalchemy comes with the sql-sqlite extra. pyarrow stays at
# the version pinned above.
have=$("$venv/bin/python" -c 'import pyiceberg, sqlalchemy; print(pyiceberg.__version__)' 2>/dev/null || true)
if [ "$have" != "$want_pyiceberg" ]; then
  pip_install "pyiceberg[sql-sqlite,pyarrow]==$want_pyiceberg" "pyarrow==$want_pyarrow"
fi
# dbt-core and dbt-postgres (psycopg2-binary: a wheel, nothing to
# compile) for examples/dbt, with the libraries they share pinned too;
# the other pins stay as they are.
# (The installed versions, not an import: importing dbt takes seconds.)
have=$("$venv/bin/python" -c 'from importlib.metadata import version as v; print(v("dbt-core"), v("dbt-postgres"))' 2>/dev/null || true)
if [ "$have" != "$want_dbt_core $want_dbt_postgres" ] || [ ! -x "$venv/bin/dbt" ]; then
  pip_install "dbt-core==$want_dbt_core" "dbt-postgres==$want_dbt_postgres" \
    "dbt-adapters==$want_dbt_adapters" "dbt-common==$want_dbt_common" \
    "pyiceberg[sql-sqlite,pyarrow]==$want_pyiceberg" "pyarrow==$want_pyarrow"
fi
# confluent-kafka's Avro, Protobuf and JSON Schema serializers and schema
# registry client (with fastavro, protobuf, googleapis-common-protos and
# jsonschema): the independent producer of source/kafka's registry
# tests; the other pins stay as they are.
want_confluent=2.16.1
have=$("$venv/bin/python" -c 'import confluent_kafka, fastavro, google.type, jsonschema; from confluent_kafka.schema_registry import protobuf, json_schema; print(confluent_kafka.version()[0])' 2>/dev/null || true)
if [ "$have" != "$want_confluent" ]; then
  pip_install "confluent-kafka[avro,schemaregistry,protobuf,json]==$want_confluent" \
    "dbt-core==$want_dbt_core" "dbt-postgres==$want_dbt_postgres" \
    "dbt-adapters==$want_dbt_adapters" "dbt-common==$want_dbt_common" \
    "pyiceberg[sql-sqlite,pyarrow]==$want_pyiceberg" "pyarrow==$want_pyarrow"
fi
# DuckDB with its iceberg extension (and avro, which it reads manifests
# with) from PyPI packages that ship the extension files, signed by
# DuckDB (they load with signature checks on): DuckDB would otherwise
# download them from its own site, which the tests can't reach. One of
# the independent readers of sink/iceberg's merge tables.
want_duckdb=1.5.5
have=$("$venv/bin/python" -c 'from importlib.metadata import version as v; print(v("duckdb"), v("duckdb-extension-iceberg"), v("duckdb-extension-avro"))' 2>/dev/null || true)
if [ "$have" != "$want_duckdb $want_duckdb $want_duckdb" ]; then
  pip_install "duckdb==$want_duckdb" "duckdb-extension-iceberg==$want_duckdb" "duckdb-extension-avro==$want_duckdb"
fi
# Apache Spark (pyspark, Java 17) with Iceberg's Spark runtime, the
# reader most Iceberg users have: sink/iceberg's REST kill test reads its
# merge table with it too. The runtime jar comes from Maven Central (mvn,
# which the REST catalog server needs anyway) into the virtualenv, where
# the tests find it beside the python this script prints
# (share/openetl/iceberg-spark-runtime.jar).
want_pyspark=4.0.1
want_iceberg_spark=org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.0
have=$("$venv/bin/python" -c 'from importlib.metadata import version as v; print(v("pyspark"))' 2>/dev/null || true)
if [ "$have" != "$want_pyspark" ]; then
  pip_install "pyspark==$want_pyspark"
fi
jars="$venv/share/openetl"
if [ "$(cat "$jars/iceberg-spark-runtime.version" 2>/dev/null)" != "$want_iceberg_spark" ]; then
  command -v mvn >/dev/null || { echo "test-tools.sh: mvn is needed to fetch $want_iceberg_spark" >&2; exit 1; }
  rm -rf "$jars.tmp" && mkdir -p "$jars.tmp"
  mvn -q -B dependency:copy -Dartifact="$want_iceberg_spark" -DoutputDirectory="$jars.tmp" >&2
  mkdir -p "$jars"
  mv "$jars.tmp"/iceberg-spark-runtime-*.jar "$jars/iceberg-spark-runtime.jar"
  rm -rf "$jars.tmp"
  echo "$want_iceberg_spark" >"$jars/iceberg-spark-runtime.version"
fi
echo "$venv/bin/python"
