"""Independent reader for the golden type test (types_test.go).

Usage: types_read.py TABLES_DIR STREAM

Follows the stream's newest sink/parquet manifest, reads every listed
file with pyarrow and prints one JSON object:

  {"types": {column: pyarrow type}, "rows": [{column: canonical text or null}]}

Each value is turned into a canonical text that types_test.go compares
with what Postgres itself computes for the same row:

  integers             decimal digits
  float32 / float64    Python's repr of the value (nan, inf, -inf, -0.0 kept)
  decimal128           the digits with every fractional digit of the scale
  bool                 true / false
  string               the string
  binary               \\x and lowercase hex (bytea's hex form)
  fixed_size_binary    a UUID's text form (16 bytes)
  date32               days since 1970-01-01
  time64[us]           microseconds since midnight
  timestamp[us, *]     microseconds since 1970-01-01 00:00 (UTC)
  month_day_nano       "months days nanoseconds"
  list<T>              a JSON array of the elements' canonical texts

Dates and times are cast to integers before leaving Arrow, so values
outside Python's datetime range (years before 1 or after 9999) read too.
"""
import json
import os
import sys
import uuid

import pyarrow as pa
import pyarrow.parquet as pq


def canon(arr):
    """Canonical texts (or None) of a pyarrow array's values."""
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        out = []
        for i in range(len(arr)):
            if not arr[i].is_valid:
                out.append(None)
                continue
            out.append(json.dumps(canon(arr[i].values), ensure_ascii=False))
        return out
    if pa.types.is_date32(t):
        return [None if v is None else str(v) for v in arr.cast(pa.int32()).to_pylist()]
    if pa.types.is_time64(t) or pa.types.is_timestamp(t):
        assert t.unit == "us", t
        return [None if v is None else str(v) for v in arr.cast(pa.int64()).to_pylist()]
    vals = arr.to_pylist()
    if pa.types.is_integer(t):
        return [None if v is None else str(v) for v in vals]
    if pa.types.is_floating(t):
        return [None if v is None else repr(float(v)) for v in vals]
    if pa.types.is_decimal(t):
        return [None if v is None else format(v, "f") for v in vals]
    if pa.types.is_boolean(t):
        return [None if v is None else ("true" if v else "false") for v in vals]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return vals
    if pa.types.is_fixed_size_binary(t):
        assert t.byte_width == 16, t
        return [None if v is None else str(uuid.UUID(bytes=v)) for v in vals]
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return [None if v is None else "\\x" + v.hex() for v in vals]
    if t == pa.month_day_nano_interval():
        return [None if v is None else f"{v.months} {v.days} {v.nanoseconds}" for v in vals]
    raise SystemExit(f"types_read.py: no canonical form for {t}")


def main():
    tables, stream = sys.argv[1], sys.argv[2]
    d = os.path.join(tables, stream)
    mdir = os.path.join(d, "_manifest")
    m = sorted(f for f in os.listdir(mdir) if f.endswith(".json"))[-1]
    with open(os.path.join(mdir, m)) as f:
        files = json.load(f)["files"]
    types, rows = {}, []
    for fl in files:
        t = pq.read_table(os.path.join(tables, fl["key"]))
        cols = {}
        for name in t.column_names:
            arr = t.column(name).combine_chunks()
            types[name] = str(arr.type)
            cols[name] = canon(arr)
        for i in range(t.num_rows):
            rows.append({name: cols[name][i] for name in t.column_names})
    print(json.dumps({"types": types, "rows": rows}, ensure_ascii=False))


if __name__ == "__main__":
    main()
