"""Independent reader for sink/iceberg output, used by the Go tests.

Usage: iceberg_read.py CATALOG_NAME SQLITE_PATH WAREHOUSE NAMESPACE OUT_DIR [--duckdb]

Opens the SQL catalog on the SQLite file with pyiceberg (not the Go code
that wrote it), and for each table of NAMESPACE reads the current
snapshot:

* tables without equality-delete files (position deletes included):
  pyiceberg's own scan;
* tables with equality-delete files, which pyiceberg 0.12 refuses to scan
  ("PyIceberg does not yet support equality deletes"): the live manifest
  entries as pyiceberg reads them from the snapshot, each file read with
  pyarrow, and the spec's rule applied here: a data row is deleted when an
  equality-delete file with a higher data sequence number holds its
  values of the delete's equality columns.

It prints one JSON object: per table the row count, distinct _openetl_id
and _openetl_seq counts, the column names, the properties, the number of
snapshots, of live data and delete files, the format version and which
reader path was used; and it writes every row, as a JSON object per line
with values in their str() form (null as null), to OUT_DIR/{table}.jsonl.

With --duckdb it also reads each table's current metadata file with
DuckDB's iceberg extension (iceberg_scan, loaded from the
duckdb-extension-iceberg package: no download), writes its rows to
OUT_DIR/{table}.duckdb.jsonl the same way and sets "duckdb_rows"; a
DuckDB that can't be loaded fails the reader.
"""
import json
import os
import sys
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFileContent


def cell(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)


def local(path):
    u = urlparse(path)
    return u.path if u.scheme in ("file", "") else path


def entries(tbl):
    snap = tbl.current_snapshot()
    if snap is None:
        return []
    out = []
    for m in snap.manifests(tbl.io):
        for e in m.fetch_manifest_entry(tbl.io, discard_deleted=True):
            out.append(e)
    return out


def read_with_deletes(tbl, ents):
    schema = tbl.schema()
    names = [f.name for f in schema.fields]
    data, deletes = [], []
    for e in ents:
        df = e.data_file
        if df.content == DataFileContent.DATA:
            data.append((e.sequence_number, df))
        elif df.content == DataFileContent.EQUALITY_DELETES:
            deletes.append((e.sequence_number, df))
        else:
            raise SystemExit(f"position and equality deletes in one table: {df.file_path}")
    # key tuple -> highest delete sequence number holding it, per id set
    dels = {}
    for seq, df in deletes:
        ids = tuple(df.equality_ids)
        cols = [schema.find_field(i).name for i in ids]
        t = pq.read_table(local(df.file_path), columns=cols)
        d = dels.setdefault(ids, {})
        for row in zip(*[t.column(c).to_pylist() for c in cols]):
            d[row] = max(d.get(row, -1), seq)
    parts = []
    for seq, df in data:
        t = pq.read_table(local(df.file_path))
        keep = [True] * t.num_rows
        for ids, d in dels.items():
            cols = [schema.find_field(i).name for i in ids]
            for i, row in enumerate(zip(*[t.column(c).to_pylist() for c in cols])):
                if d.get(row, -1) > seq:
                    keep[i] = False
        t = t.filter(pa.array(keep, type=pa.bool_()))
        for n in names:  # columns added after the file was written
            if n not in t.column_names:
                t = t.append_column(n, pa.nulls(t.num_rows))
        parts.append(t.select(names))
    if not parts:
        return tbl.scan().to_arrow().select(names), len(data), len(deletes)
    return pa.concat_tables(parts, promote_options="permissive"), len(data), len(deletes)


def duckdb_connect():
    import glob
    import duckdb
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for ext in ("avro", "iceberg"):
        mod = __import__("duckdb_extension_" + ext)
        paths = glob.glob(os.path.join(os.path.dirname(mod.__file__), "extensions", "*", ext + ".duckdb_extension"))
        if not paths:
            raise SystemExit(f"duckdb_extension_{ext} ships no {ext}.duckdb_extension")
        con.execute(f"LOAD '{paths[0]}'")
    con.execute("SET TimeZone = 'UTC'")
    return con


def duckdb_rows(con, tbl):
    loc = local(tbl.metadata_location)
    cur = con.execute("SELECT * FROM iceberg_scan(?)", [loc])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def main():
    name, db, warehouse, ns, out_dir = sys.argv[1:6]
    duck = duckdb_connect() if "--duckdb" in sys.argv[6:] else None
    cat = SqlCatalog(name, uri=f"sqlite:///{db}", warehouse=warehouse)
    result = {}
    for ident in cat.list_tables(ns):
        tname = ident[-1]
        tbl = cat.load_table(ident)
        ents = entries(tbl)
        contents = [e.data_file.content for e in ents]
        if DataFileContent.EQUALITY_DELETES in contents:
            t, data_files, delete_files = read_with_deletes(tbl, ents)
            reader = "pyiceberg-metadata+spec-equality-deletes"
        else:
            t = tbl.scan().to_arrow()
            data_files = contents.count(DataFileContent.DATA)
            delete_files = len(contents) - data_files
            reader = "pyiceberg-scan"
        cols = t.column_names
        with open(os.path.join(out_dir, tname + ".jsonl"), "w") as f:
            for r in t.to_pylist():
                f.write(json.dumps({k: cell(v) for k, v in r.items()}) + "\n")
        extra = {}
        if duck is not None:
            rows = duckdb_rows(duck, tbl) if tbl.current_snapshot() is not None else []
            with open(os.path.join(out_dir, tname + ".duckdb.jsonl"), "w") as f:
                for r in rows:
                    f.write(json.dumps({k: cell(v) for k, v in r.items()}) + "\n")
            extra["duckdb_rows"] = len(rows)
        result[tname] = {
            "rows": t.num_rows,
            "distinct_ids": len(set(t.column("_openetl_id").to_pylist())) if "_openetl_id" in cols else 0,
            "distinct_seqs": len(set(t.column("_openetl_seq").to_pylist())) if "_openetl_seq" in cols else 0,
            "columns": cols,
            "properties": dict(tbl.properties),
            "snapshots": len(tbl.metadata.snapshots),
            "data_files": data_files,
            "delete_files": delete_files,
            "format_version": tbl.metadata.format_version,
            "reader": reader,
            **extra,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
