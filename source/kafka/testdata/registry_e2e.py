"""An independent producer and checker for source/kafka's registry tests.

produce BROKERS REGISTRY TOPIC PHASE
    Writes Avro messages with confluent-kafka's AvroSerializer, which
    registers each schema in the registry (subject TOPIC-value) and frames
    each value in the Confluent wire format. PHASE is "v1" (every Avro type
    the source maps, schema version 1), "v2" (version 2: a field added, an
    int promoted to long, an enum label added), "v1b" (more of version 1
    after version 2, as an old producer still running writes them) or
    "debezium" (Debezium-shaped change events with an Avro key, Debezium's
    semantic types, and a tombstone).

check TABLES TOPIC PHASES
    Reads the topic's sink/parquet table (following its newest manifest)
    with pyarrow and compares every value with what produce wrote for the
    comma-separated PHASES, by id. With v2 among them, the table must be
    widened: n is int64 in the schema its files unify to, and in every file
    holding a v2 or v1b row (v1b rows come after the widening). Prints the
    differences; exits 1 if any.
    With REGISTRY_E2E_PERTURB set, one expected value is off by a cent, so
    a check that passes then is broken.

The expected values come from the same Python data the producer
serialized: nothing here uses the Go code under test.
"""
import datetime as dt
import decimal
import faulthandler
import json
import os
import struct
import sys
import uuid

UTC = dt.timezone.utc


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


SCHEMA_V1 = {
    "type": "record", "name": "Event", "namespace": "openetl.test", "fields": [
        {"name": "id", "type": "long"},
        {"name": "flag", "type": "boolean"},
        {"name": "n", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "raw", "type": "bytes"},
        {"name": "name", "type": "string"},
        {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "big", "type": {"type": "fixed", "name": "D16", "size": 16, "logicalType": "decimal",
                                 "precision": 38, "scale": 4}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "ltm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "dur", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}},
        {"name": "nums", "type": {"type": "array", "items": "long"}},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
        {"name": "addr", "type": {"type": "record", "name": "Addr", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
        {"name": "opt", "type": ["null", "string"], "default": None},
        {"name": "multi", "type": ["null", "int", "string"], "default": None},
    ]}


def schema_v2():
    s = json.loads(json.dumps(SCHEMA_V1))
    for f in s["fields"]:
        if f["name"] == "n":
            f["type"] = "long"
        if f["name"] == "color":
            f["type"]["symbols"] = ["RED", "GREEN", "BLUE"]
    s["fields"].append({"name": "added", "type": ["null", "string"], "default": None})
    return s


def dur(months, days, millis):
    return struct.pack("<III", months, days, millis)


def rows_v1():
    out = []
    for i in range(1, 41):
        out.append({
            "id": i, "flag": i % 2 == 0, "n": -2147483648 if i == 1 else i * 1000,
            "f": 0.1 * i, "d": 1e300 if i == 2 else i / 3,
            "raw": bytes([i, 0, 255]), "name": "name ü %d, \"q\"" % i if i % 5 else "",
            "fx": bytes([1, 2, 3, i]), "color": "RED" if i % 2 else "GREEN",
            "price": decimal.Decimal("-12345678.91") if i == 3 else decimal.Decimal(i).scaleb(-2),
            "big": decimal.Decimal("1234567890123456789012345678901234.5678") if i == 4 else decimal.Decimal("0.0001"),
            "uid": str(uuid.UUID(int=i * 7919)),
            "day": dt.date(1, 1, 1) if i == 5 else dt.date(2024, 2, 29) + dt.timedelta(days=i),
            "tm": dt.time(23, 59, 59, 999000) if i == 6 else dt.time(i % 24, 30, 15, 123000),
            "tu": dt.time(0, 0, 0, i),
            "tsm": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) if i == 7 else
            dt.datetime(2024, 1, 1, 12, 0, 0, i * 1000, tzinfo=UTC),
            "tsu": dt.datetime(2024, 6, 30, 23, 59, 59, 999999, tzinfo=UTC) - dt.timedelta(microseconds=i),
            "lts": dt.datetime(2000, 1, 1, 0, 0, 0, i),
            "ltm": dt.datetime(2000, 1, 1, 0, 0, 0, i * 1000),
            "dur": dur(i, 2 * i, 3_600_000 + i),
            "nums": [i, -i, 2 ** 62] if i % 3 else [],
            "tags": ["a b", None, "c,d", "NULL", ""] if i % 4 == 0 else ["t%d" % i],
            "attrs": {"k": i, "é": -i},
            "addr": {"city": "City \"%d\"" % i, "zip": None if i % 2 else 10000 + i},
            "opt": None if i % 3 == 0 else "opt%d" % i,
            "multi": None if i % 3 == 0 else (i if i % 3 == 1 else "s%d" % i),
        })
    return out


def rows_v2():
    out = []
    for r in rows_v1()[:10]:
        r = dict(r)
        r["id"] += 1000
        r["n"] = 2 ** 40 + r["id"]
        r["color"] = "BLUE"
        r["added"] = "new %d" % r["id"]
        out.append(r)
    return out


def rows_v1b():
    out = []
    for r in rows_v1()[:5]:
        r = dict(r)
        r["id"] += 2000
        r["n"] = 2147483647 - r["id"]
        out.append(r)
    return out


ROWS = {"v1": rows_v1, "v2": rows_v2, "v1b": rows_v1b}


# Debezium-shaped change events (what Debezium's Avro converter writes
# for a Postgres table), with Debezium's semantic types.
DBZ_VALUE = {
    "type": "record", "name": "Value", "namespace": "pg.public.customers", "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "born", "type": ["null", {"type": "int", "connect.version": 1,
                                           "connect.name": "io.debezium.time.Date"}], "default": None},
        {"name": "seen", "type": ["null", {"type": "long", "connect.version": 1,
                                           "connect.name": "io.debezium.time.MicroTimestamp"}], "default": None},
        {"name": "at", "type": ["null", {"type": "string", "connect.version": 1,
                                         "connect.name": "io.debezium.time.ZonedTimestamp"}], "default": None},
        {"name": "doc", "type": ["null", {"type": "string", "connect.version": 1,
                                          "connect.name": "io.debezium.data.Json"}], "default": None},
        {"name": "amount", "type": ["null", {
            "type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
            "connect.doc": "Variable scaled decimal", "connect.version": 1,
            "connect.name": "io.debezium.data.VariableScaleDecimal"}], "default": None},
        {"name": "price", "type": ["null", {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
                                            "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                                            "connect.name": "org.apache.kafka.connect.data.Decimal",
                                            "logicalType": "decimal"}], "default": None},
        {"name": "mood", "type": ["null", {"type": "string", "connect.version": 1,
                                           "connect.parameters": {"allowed": "sad,ok,happy"},
                                           "connect.name": "io.debezium.data.Enum"}], "default": None},
    ], "connect.name": "pg.public.customers.Value"}

DBZ_ENVELOPE = {
    "type": "record", "name": "Envelope", "namespace": "pg.public.customers", "fields": [
        {"name": "before", "type": ["null", DBZ_VALUE], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "version", "type": "string"},
                                               {"name": "connector", "type": "string"},
                                               {"name": "ts_ms", "type": "long"},
                                               {"name": "lsn", "type": ["null", "long"], "default": None}],
                                    "connect.name": "io.debezium.connector.postgresql.Source"}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "transaction", "type": ["null", {
            "type": "record", "name": "block", "namespace": "event",
            "fields": [{"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
                       {"name": "data_collection_order", "type": "long"}],
            "connect.version": 1, "connect.name": "event.block"}], "default": None},
    ], "connect.version": 2, "connect.name": "pg.public.customers.Envelope"}

DBZ_KEY = {"type": "record", "name": "Key", "namespace": "pg.public.customers",
           "fields": [{"name": "id", "type": "int"}], "connect.name": "pg.public.customers.Key"}


def vsd(s):
    """A VariableScaleDecimal of the decimal text s."""
    d = decimal.Decimal(s)
    sign, digits, exp = d.as_tuple()
    unscaled = int("".join(map(str, digits))) * (-1 if sign else 1)
    n = max(1, (unscaled.bit_length() + 8) // 8)
    return {"scale": -exp, "value": unscaled.to_bytes(n, "big", signed=True)}


def dbz_row(i, name):
    return {"id": i, "name": name, "born": 19000 + i, "seen": 1_700_000_000_000_000 + i,
            "at": "2024-03-01T10:00:00.%06d+02:00" % i, "doc": json.dumps({"i": i, "l": [1, 2]}),
            "amount": vsd("-1.234" if i == 1 else "%d.5" % i), "price": decimal.Decimal("%d.10" % i), "mood": "ok"}


def dbz_events():
    src = {"version": "3.6.1.Final", "connector": "postgresql", "ts_ms": 1, "lsn": 5}
    ev = []
    for i in range(1, 6):
        ev.append((i, {"before": None, "after": dbz_row(i, "snap %d" % i), "source": src, "op": "r", "ts_ms": 1,
                       "transaction": None}))
    ev.append((6, {"before": None, "after": dbz_row(6, "new"), "source": src, "op": "c", "ts_ms": 2,
                   "transaction": {"id": "t1", "total_order": 1, "data_collection_order": 1}}))
    ev.append((2, {"before": dbz_row(2, "snap 2"), "after": dbz_row(2, "changed"), "source": src, "op": "u",
                   "ts_ms": 3, "transaction": None}))
    ev.append((3, {"before": dbz_row(3, "snap 3"), "after": None, "source": src, "op": "d", "ts_ms": 4,
                   "transaction": None}))
    ev.append((3, None))  # the tombstone after a delete
    ev.append((4, {"before": None, "after": None, "source": src, "op": "d", "ts_ms": 5, "transaction": None}))
    return ev


def produce(brokers, registry, topic, phase):
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    # A timeout, so an endpoint the registry never answers fails the
    # test instead of hanging it; and the topic strategy named, because
    # the default (associated names) first asks an associations API
    # that Apicurio's Confluent endpoint does not have.
    sr = SchemaRegistryClient({"url": registry, "timeout": 30})
    conf = {"subject.name.strategy": topic_subject_name_strategy}
    p = Producer({"bootstrap.servers": brokers, "linger.ms": 0})
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    if phase in ROWS:
        schema = schema_v2() if phase == "v2" else SCHEMA_V1
        ser = AvroSerializer(sr, json.dumps(schema), conf=conf)
        for r in ROWS[phase]():
            p.produce(topic, key=str(r["id"]).encode(), value=ser(r, vctx), partition=r["id"] % 2)
    elif phase == "debezium":
        vser = AvroSerializer(sr, json.dumps(DBZ_ENVELOPE), conf=conf)
        kser = AvroSerializer(sr, json.dumps(DBZ_KEY), conf=conf)
        for i, e in dbz_events():
            p.produce(topic, key=kser({"id": i}, kctx), value=None if e is None else vser(e, vctx), partition=0)
    else:
        raise SystemExit("unknown phase " + phase)
    if p.flush(30) != 0:
        raise SystemExit("produce: messages not delivered")


def read_files(tables, topic):
    """The pyarrow tables of the topic's files, in its newest manifest."""
    import pyarrow.parquet as pq
    mdir = os.path.join(tables, topic, "_manifest")
    versions = sorted(f for f in os.listdir(mdir) if f.endswith(".json"))
    manifest = json.load(open(os.path.join(mdir, versions[-1])))
    return [pq.read_table(os.path.join(tables, f["key"])) for f in manifest["files"]]


def read_table(tables, topic):
    rows = []
    for t in read_files(tables, topic):
        rows += t.to_pylist()
    return rows


def check_widened(tables, topic, bad):
    """The files unify to a table with n as int64 and the added column,
    read whole (every file cast to it) with the values exact; each file
    with a v2 or v1b row has n as int64 itself."""
    import pyarrow as pa
    files = read_files(tables, topic)
    schema = pa.unify_schemas([t.schema for t in files], promote_options="permissive")
    if schema.field("n").type != pa.int64():
        bad.append("unified n: %s, want int64" % schema.field("n").type)
        return
    if "added" not in schema.names:
        bad.append("unified schema has no column added: %s" % schema.names)
        return
    late = {r["id"] for r in rows_v2() + rows_v1b()}
    for t in files:
        ids = set(t.column("id").to_pylist())
        if ids & late and t.schema.field("n").type != pa.int64():
            bad.append("a file with ids %s has n %s, want int64" % (sorted(ids & late)[:3], t.schema.field("n").type))
    whole = pa.concat_tables(files, promote_options="permissive")
    got = dict(zip(whole.column("id").to_pylist(), whole.column("n").to_pylist()))
    for r in rows_v1() + rows_v2() + rows_v1b():
        if r["id"] in got and got[r["id"]] != r["n"]:
            bad.append("widened table: id %d n %r, want %r" % (r["id"], got[r["id"]], r["n"]))


def expect_event(r, v2):
    """The Arrow values (as pyarrow's to_pylist gives them) of row r."""
    e = dict(r)
    e["f"] = f32(r["f"])
    e["uid"] = uuid.UUID(r["uid"]).bytes
    e["tm"] = r["tm"]
    e["tu"] = r["tu"]
    e["dur"] = None  # compared apart: pyarrow's MonthDayNano
    e["attrs"] = json.dumps(r["attrs"], ensure_ascii=False)
    e["addr"] = json.dumps(r["addr"])
    e["multi"] = None if r["multi"] is None else str(r["multi"])
    e["ltm"] = r["ltm"]
    if os.environ.get("REGISTRY_E2E_PERTURB") and r["id"] == 1:
        e["price"] += decimal.Decimal("0.01")  # the checker's own test: must fail
    return e


def held_intervals(checkpoints):
    """Key → (months, days, nanoseconds) of the held values of column dur."""
    import glob
    import re
    out = {}
    for f in glob.glob(os.path.join(checkpoints, "**", "_held", "**", "*.jsonl"), recursive=True):
        for line in open(f):
            h = json.loads(line)
            if h.get("column") != "dur":
                continue
            m = re.fullmatch(r"(-?\d+) mons (-?\d+) days (\d+):(\d\d):(\d\d)\.(\d{6})", h["value"])
            if not m:
                out[h.get("key")] = h["value"]
                continue
            mo, d, hh, mi, ss, us = (int(x) for x in m.groups())
            out[h.get("key")] = (mo, d, ((hh * 60 + mi) * 60 + ss) * 1_000_000_000 + us * 1000)
    return out


def check(tables, topic, phases):
    rows = read_table(tables, topic)
    held = held_intervals(os.path.join(os.path.dirname(tables), "checkpoints"))
    bad = []
    if "debezium" in phases:
        check_debezium(rows, bad)
    else:
        want = {}
        for phase in phases:
            for r in ROWS[phase]():
                want[r["id"]] = (r, phase == "v2")
        if "v2" in phases:
            check_widened(tables, topic, bad)
        got = {r["id"]: r for r in rows}
        if len(rows) != len(want) or set(got) != set(want):
            bad.append("ids: got %d rows %s, want %s" % (len(rows), sorted(got), sorted(want)))
        for i, (r, v2) in sorted(want.items()):
            g = got.get(i)
            if g is None:
                continue
            e = expect_event(r, v2)
            for k, v in e.items():
                if k == "dur":
                    m, d, ms = struct.unpack("<III", r["dur"])
                    if "dur" in g:
                        gv = g["dur"]
                        gv = (gv.months, gv.days, gv.nanoseconds)
                    else:
                        # sink/parquet takes no intervals: the engine holds them.
                        gv = held.get(str(i))
                    if gv != (m, d, ms * 1_000_000):
                        bad.append("id %d dur: got %r, want %r" % (i, gv, (m, d, ms * 1_000_000)))
                    continue
                if k in ("attrs", "addr"):
                    if json.loads(g[k]) != json.loads(v):
                        bad.append("id %d %s: got %r, want %r" % (i, k, g[k], v))
                    continue
                if g.get(k) != v:
                    bad.append("id %d %s: got %r, want %r" % (i, k, g.get(k), v))
            if "added" in g and not v2 and g["added"] is not None:
                bad.append("id %d added: got %r, want None" % (i, g["added"]))
    for b in bad:
        print(b)
    if bad:
        sys.exit(1)
    print("ok: %d rows" % len(rows))


def check_debezium(rows, bad):
    want = []
    for i, e in dbz_events():
        if e is None:
            continue
        op = {"r": "insert", "c": "insert", "u": "update", "d": "delete"}[e["op"]]
        row = e["after"] if e["op"] != "d" else e["before"]
        want.append((op, i, row))
    got = [(r["_openetl_op"], r["id"], r) for r in rows]
    got.sort(key=lambda x: x[2]["_openetl_seq"])
    if [(g[0], g[1]) for g in got] != [(w[0], w[1]) for w in want]:
        bad.append("ops: got %s, want %s" % ([(g[0], g[1]) for g in got], [(w[0], w[1]) for w in want]))
        return
    for (op, i, g), (_, _, w) in zip(got, want):
        if w is None:  # a delete without a before image: the key's fields
            for k in ("name", "born", "seen", "at", "doc", "amount", "price", "mood"):
                if g[k] is not None:
                    bad.append("delete %d by key: %s is %r, want None" % (i, k, g[k]))
            continue
        a = w["amount"]
        amount = decimal.Decimal(int.from_bytes(a["value"], "big", signed=True)).scaleb(-a["scale"])
        exp = {
            "name": w["name"], "born": dt.date(1970, 1, 1) + dt.timedelta(days=w["born"]),
            "seen": dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=w["seen"]),
            "at": dt.datetime.fromisoformat(w["at"]).astimezone(UTC), "doc": w["doc"],
            "amount": str(amount), "price": w["price"], "mood": w["mood"],
        }
        for k, v in exp.items():
            if g[k] != v:
                bad.append("%s %d %s: got %r, want %r" % (op, i, k, g[k], v))


if __name__ == "__main__":
    # A hang (a client library waiting on a server without a timeout)
    # prints every thread's stack and exits instead of holding the Go
    # test until its package's deadline; a command takes seconds.
    faulthandler.dump_traceback_later(240, exit=True)
    if sys.argv[1] == "produce":
        produce(*sys.argv[2:6])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4].split(","))
    else:
        raise SystemExit(__doc__)
