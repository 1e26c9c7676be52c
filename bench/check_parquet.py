"""Independent check of the Parquet files a benchmark run wrote: reads the
column given (default "id") of every file named on the command line with
pyarrow and prints count, distinct, min, max and sum as JSON, in the shape
of openetl-bench's check; with --ops, also the rows per _openetl_op
value. Used by scripts/bench-compare.sh."""
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq


def main():
    col, ops, files = "id", False, []
    for a in sys.argv[1:]:
        if a.startswith("--column="):
            col = a.split("=", 1)[1]
        elif a == "--ops":
            ops = True
        else:
            files.append(a)
    cols = [col] + (["_openetl_op"] if ops else [])
    ids, op = [], []
    for f in files:
        t = pq.read_table(f, columns=cols)
        ids.extend(t.column(col).chunks)
        if ops:
            op.extend(t.column("_openetl_op").chunks)
    arr = pa.chunked_array(ids, type=ids[0].type if ids else pa.int64())
    out = {"count": len(arr), "distinct": 0, "min": -1, "max": 0, "sum": 0}
    if len(arr):
        mm = pc.min_max(arr)
        out.update(distinct=pc.count_distinct(arr).as_py(), min=mm["min"].as_py(),
                   max=mm["max"].as_py(), sum=pc.sum(arr).as_py())
    if ops:
        out["ops"] = {}
        if op:
            vc = pc.value_counts(pa.chunked_array(op))
            out["ops"] = {v["values"].as_py(): v["counts"].as_py() for v in vc}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
