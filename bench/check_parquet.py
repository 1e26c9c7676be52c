"""Independent check of the Parquet files a benchmark run wrote: reads the
column given (default "id") of every file named on the command line with
pyarrow and prints count, distinct, min, max and sum as JSON, in the shape
of openetl-bench's check. Used by scripts/bench-compare.sh."""
import json
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq


def main():
    col = "id"
    files = sys.argv[1:]
    if files and files[0].startswith("--column="):
        col = files.pop(0).split("=", 1)[1]
    chunks = []
    for f in files:
        chunks.extend(pq.read_table(f, columns=[col]).column(col).chunks)
    import pyarrow as pa
    arr = pa.chunked_array(chunks, type=chunks[0].type if chunks else pa.int64())
    out = {"count": len(arr), "distinct": 0, "min": -1, "max": 0, "sum": 0}
    if len(arr):
        mm = pc.min_max(arr)
        out.update(distinct=pc.count_distinct(arr).as_py(), min=mm["min"].as_py(),
                   max=mm["max"].as_py(), sum=pc.sum(arr).as_py())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
