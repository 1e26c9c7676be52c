"""Independent reader for sink/iceberg output: Apache Spark with Iceberg's
Spark runtime, through a REST catalog. Used by the Go tests.

Usage: spark_read.py RUNTIME_JAR CATALOG_URI NAMESPACE OUT_DIR TABLE...

Starts a local Spark session (one core) with the iceberg-spark-runtime jar
RUNTIME_JAR and a REST catalog at CATALOG_URI, reads each TABLE of
NAMESPACE with spark.table (Spark applies the table's position deletes,
deletion vectors and equality deletes itself), and writes every row, as
a JSON object per line, to OUT_DIR/{table}.spark.jsonl, in the form
iceberg_read.py writes pyiceberg's rows: values in their str() form as
pyarrow's to_pylist would give them (Spark's timestamps, which are UTC
instants here, get their UTC offset back; structs are dicts), null as
null. It prints one JSON object: per table, its row count.
"""
import datetime
import json
import os
import sys

os.environ["TZ"] = "UTC"

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import types as T  # noqa: E402


def plain(v, dt):
    """Spark's Python value of type dt as pyarrow's to_pylist gives it."""
    if v is None:
        return None
    if isinstance(dt, T.TimestampType):
        return v.replace(tzinfo=datetime.timezone.utc)
    if isinstance(dt, T.StructType):
        return {f.name: plain(v[f.name], f.dataType) for f in dt.fields}
    if isinstance(dt, T.ArrayType):
        return [plain(x, dt.elementType) for x in v]
    if isinstance(dt, T.MapType):
        return [(plain(k, dt.keyType), plain(x, dt.valueType)) for k, x in v.items()]
    return v


def cell(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def main():
    jar, uri, ns, out_dir = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[1]").appName("openetl-spark-read")
             .config("spark.jars", jar)
             .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
             .config("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.lake.type", "rest")
             .config("spark.sql.catalog.lake.uri", uri)
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    result = {}
    try:
        for name in sys.argv[5:]:
            df = spark.table(f"lake.`{ns}`.`{name}`")
            fields = df.schema.fields
            n = 0
            with open(os.path.join(out_dir, name + ".spark.jsonl"), "w") as f:
                for row in df.toLocalIterator():
                    f.write(json.dumps({fd.name: cell(plain(row[i], fd.dataType)) for i, fd in enumerate(fields)}) + "\n")
                    n += 1
            result[name] = {"rows": n}
    finally:
        spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
