"""Independent reader for sink/parquet output, used by the Go tests.

Usage: read_parquet_tables.py TABLES_DIR OUT_DIR [KEY_ROOT]

Manifests name files by their keys in the bucket: relative to KEY_ROOT
(default TABLES_DIR), which holds TABLES_DIR when the destination writes
under a prefix.

For each stream directory under TABLES_DIR it follows the newest manifest
(_manifest/{version}.json, highest version), reads every listed file with
pyarrow, and checks that the files under data/ are exactly the listed
ones. It prints one JSON object: per stream the row count, the number of
distinct _openetl_id values, the number of distinct (_openetl_seq) values,
the extra and missing files, the column names; and it writes each
stream's _openetl_seq values, one per line, to OUT_DIR/{stream}.seq,
and every column's values (JSON; other than strings, numbers, booleans
and null as their text) to OUT_DIR/{stream}.values.json.
"""
import json
import os
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq


def main():
    tables, out_dir = sys.argv[1], sys.argv[2]
    root = sys.argv[3] if len(sys.argv) > 3 else tables
    prefix = os.path.relpath(tables, root)
    prefix = "" if prefix == "." else prefix + "/"
    result = {}
    for stream in sorted(os.listdir(tables)):
        mdir = os.path.join(tables, stream, "_manifest")
        if stream.startswith("_") or not os.path.isdir(mdir):
            continue
        versions = sorted(f for f in os.listdir(mdir) if f.endswith(".json"))
        with open(os.path.join(mdir, versions[-1])) as f:
            manifest = json.load(f)
        listed = [fl["key"] for fl in manifest["files"]]
        ddir = os.path.join(tables, stream, "data")
        present = sorted(
            f"{prefix}{stream}/data/{f}" for f in (os.listdir(ddir) if os.path.isdir(ddir) else []) if f.endswith(".parquet")
        )
        rows, ids, seqs, columns, values = 0, set(), [], None, {}
        for key in listed:
            t = pq.read_table(os.path.join(root, key))
            rows += t.num_rows
            ids.update(t.column("_openetl_id").to_pylist())
            seqs.extend(t.column("_openetl_seq").to_pylist())
            columns = t.column_names
            for c in t.column_names:
                values.setdefault(c, []).extend(t.column(c).to_pylist())
            synced = t.column("_openetl_synced_at")
            assert str(synced.type) == "timestamp[us, tz=UTC]", synced.type
            assert pc.all(pc.is_valid(t.column("_openetl_op"))).as_py()
        with open(os.path.join(out_dir, stream + ".seq"), "w") as f:
            f.write("\n".join(str(s) for s in sorted(seqs)))
        with open(os.path.join(out_dir, stream + ".values.json"), "w") as f:
            json.dump(values, f, default=str)
        result[stream] = {
            "rows": rows,
            "distinct_ids": len(ids),
            "distinct_seqs": len(set(seqs)),
            "manifest_rows": sum(fl["rows"] for fl in manifest["files"]),
            "extra_files": sorted(set(present) - set(listed)),
            "missing_files": sorted(set(listed) - set(present)),
            "columns": columns,
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
