"""Reads two Parquet files with pyarrow and prints, as JSON, whether
their Arrow schemas (metadata included) and values are equal, each
file's schema, and the leaf columns whose chunks carry statistics.

    python compare.py A.parquet B.parquet
"""
import json
import sys

import pyarrow.parquet as pq


def stats(path):
    md = pq.ParquetFile(path).metadata
    out = {}
    for rg in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(rg).column(c)
            s = col.statistics
            out[col.path_in_schema] = [bool(col.is_stats_set), bool(s is not None and s.has_min_max), bool(s is not None and s.has_null_count)]
    return out


a, b = (pq.read_table(p) for p in sys.argv[1:3])
diff = []
if a.num_rows != b.num_rows:
    diff.append(f"rows {a.num_rows} vs {b.num_rows}")
else:
    for name in a.column_names:
        if name not in b.column_names:
            diff.append(f"{name}: missing")
        elif a[name].type != b[name].type or a[name].to_pylist() != b[name].to_pylist():
            diff.append(f"{name}: {a[name].to_pylist()[:5]} vs {b[name].to_pylist()[:5]}")
print(json.dumps({
    "schema_equal": a.schema.equals(b.schema, check_metadata=True),
    "diff": diff,
    "schemas": [a.schema.to_string(show_schema_metadata=True), b.schema.to_string(show_schema_metadata=True)],
    "stats": [stats(p) for p in sys.argv[1:3]],
    "rows": a.num_rows,
}))
