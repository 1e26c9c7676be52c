"""An independent producer and checker for source/kafka's Protobuf and
JSON Schema registry tests, serving commands on stdin (one process a
test: its imports cost seconds), one line each, answering one line:
"ok ..." or "error ..." (the differences, "; "-joined).

produce FORMAT BROKERS REGISTRY TOPIC PHASE
    FORMAT "pb": Protobuf messages written with confluent-kafka's
    ProtobufSerializer (message classes built at run time from a
    FileDescriptorProto), which registers the file in the registry
    (subject TOPIC-value) and frames each value with the message index;
    keys are the same file's second message type (subject TOPIC-key).
    FORMAT "js": JSON values written with its JSONSerializer (subject
    TOPIC-value, keys framed too, subject TOPIC-key). PHASE "v1" is every
    type the source maps; "v2" is schema version 2, a field added.

check FORMAT TABLES TOPIC PHASES
    Reads the topic's sink/parquet table with pyarrow and compares every
    value with what produce wrote for the comma-separated PHASES, by id.
    "perturb" as a sixth word makes one expected value wrong, so that a
    check that passes then is broken.

The expected values come from the Python data the producer serialized:
nothing here uses the Go code under test.
"""
import datetime as dt
import decimal
import faulthandler
import json
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from registry_e2e import f32, held_intervals, read_table  # noqa: E402

UTC = dt.timezone.utc
COLORS = ["RED", "GREEN", "BLUE"]

# --- Protobuf -------------------------------------------------------

WKT = ["google/protobuf/timestamp.proto", "google/protobuf/duration.proto",
       "google/protobuf/wrappers.proto", "google/protobuf/struct.proto"]


def pb_classes(version):
    """The Ev message class of schema version 1 or 2, and the key's."""
    from google.protobuf import descriptor_pb2 as d2, descriptor_pool, message_factory
    from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2, wrappers_pb2
    F = d2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    for m in (timestamp_pb2, duration_pb2, wrappers_pb2, struct_pb2):
        pool.AddSerializedFile(m.DESCRIPTOR.serialized_pb)
    fdp = d2.FileDescriptorProto(name="openetl/ev.proto", package="openetl.test", syntax="proto3")
    fdp.dependency.extend(WKT)
    ev = fdp.message_type.add(name="Ev")
    color = ev.enum_type.add(name="Color")
    for i, n in enumerate(COLORS):
        color.value.add(name=n, number=i)
    addr = ev.nested_type.add(name="Addr")
    addr.field.add(name="city", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    addr.oneof_decl.add(name="_zip")
    addr.field.add(name="zip", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL, oneof_index=0, proto3_optional=True)
    entry = ev.nested_type.add(name="AttrsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    # Synthetic oneofs (proto3 optional) come after the real ones.
    ev.oneof_decl.add(name="choice")
    oneofs = {"choice": 0}

    def field(name, num, typ, type_name=None, repeated=False, oneof=None):
        f = ev.field.add(name=name, number=num, type=typ, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
        if type_name:
            f.type_name = type_name
        if oneof:
            if oneof not in oneofs:
                oneofs[oneof] = len(ev.oneof_decl)
                ev.oneof_decl.add(name=oneof)
            f.oneof_index = oneofs[oneof]
            f.proto3_optional = oneof.startswith("_")

    for name, num, typ in [("id", 1, F.TYPE_INT64), ("flag", 2, F.TYPE_BOOL), ("i32", 3, F.TYPE_INT32),
                           ("s32", 4, F.TYPE_SINT32), ("s64", 5, F.TYPE_SINT64), ("u32", 6, F.TYPE_UINT32),
                           ("u64", 7, F.TYPE_UINT64), ("f32", 8, F.TYPE_FIXED32), ("f64", 9, F.TYPE_FIXED64),
                           ("sf32", 10, F.TYPE_SFIXED32), ("sf64", 11, F.TYPE_SFIXED64), ("fl", 12, F.TYPE_FLOAT),
                           ("db", 13, F.TYPE_DOUBLE), ("name", 14, F.TYPE_STRING), ("raw", 15, F.TYPE_BYTES)]:
        field(name, num, typ)
    M = F.TYPE_MESSAGE
    field("color", 16, F.TYPE_ENUM, ".openetl.test.Ev.Color")
    field("ts", 17, M, ".google.protobuf.Timestamp")
    field("dur", 18, M, ".google.protobuf.Duration")
    field("sv", 19, M, ".google.protobuf.StringValue")
    field("iv", 20, M, ".google.protobuf.Int64Value")
    field("bv", 21, M, ".google.protobuf.BoolValue")
    field("dv", 22, M, ".google.protobuf.DoubleValue")
    field("st", 23, M, ".google.protobuf.Struct")
    field("addr", 24, M, ".openetl.test.Ev.Addr")
    field("nums", 25, F.TYPE_INT64, repeated=True)
    field("tags", 26, F.TYPE_STRING, repeated=True)
    field("attrs", 27, M, ".openetl.test.Ev.AttrsEntry", repeated=True)
    field("addrs", 28, M, ".openetl.test.Ev.Addr", repeated=True)
    field("opt", 29, F.TYPE_STRING, oneof="_opt")
    field("cs", 30, F.TYPE_STRING, oneof="choice")
    field("ci", 31, F.TYPE_INT64, oneof="choice")
    field("tss", 32, M, ".google.protobuf.Timestamp", repeated=True)
    field("colors", 33, F.TYPE_ENUM, ".openetl.test.Ev.Color", repeated=True)
    if version == 2:
        field("added", 34, F.TYPE_STRING, oneof="_added")
    key = fdp.message_type.add(name="Key")
    key.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    pool.Add(fdp)
    get = message_factory.GetMessageClass
    return get(pool.FindMessageTypeByName("openetl.test.Ev")), get(pool.FindMessageTypeByName("openetl.test.Key"))


def pb_rows(phase):
    out = []
    for i in range(1, 31):
        out.append({
            "id": i, "flag": i % 2 == 0, "i32": -2 ** 31 if i == 1 else i * 1000, "s32": -i,
            "s64": -2 ** 63 if i == 2 else -i * 10 ** 12, "u32": 2 ** 32 - 1 if i == 3 else i,
            "u64": 2 ** 64 - 1 if i == 4 else i, "f32": i, "f64": 2 ** 64 - 1 if i == 5 else i,
            "sf32": -i, "sf64": -i, "fl": 0.1 * i, "db": 1e300 if i == 6 else i / 3,
            "name": "name ü %d, \"q\"" % i if i % 5 else "", "raw": bytes([i, 0, 255]) if i % 7 else b"",
            "color": i % 3,
            "ts": None if i % 4 == 0 else (dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) if i == 7 else
                                           dt.datetime(2024, 1, 1, 12, 0, 0, i * 1000, tzinfo=UTC)),
            "dur": dt.timedelta(seconds=3723, microseconds=i) if i % 3 else None,
            "sv": "" if i == 9 else ("s%d" % i if i % 2 else None),
            "iv": -i if i % 3 else None, "bv": False if i == 10 else (True if i % 2 else None),
            "dv": 0.5 * i if i % 4 else None,
            "st": {"k": [i, "x", None, {"n": True}], "s": "v"} if i % 2 else None,
            "addr": {"city": "City %d" % i, "zip": 10000 + i if i % 2 == 0 else None} if i % 5 else None,
            "nums": [i, -i, 2 ** 62] if i % 3 else [],
            "tags": ["a b", "", "NULL", "c,d", "q\"x"] if i % 4 == 0 else ["t%d" % i],
            "attrs": {"k": i, "é": -i} if i % 2 else {},
            "addrs": [{"city": "A%d" % i, "zip": i}, {"city": "B", "zip": None}] if i % 3 == 0 else [],
            "opt": None if i % 3 == 0 else "opt%d" % i,
            "cs": "c%d" % i if i % 3 == 1 else None, "ci": i * 10 ** 10 if i % 3 == 2 else None,
            "tss": [dt.datetime(2024, 2, 29, 0, 0, 0, i, tzinfo=UTC)] if i % 2 else [],
            "colors": [1, 2, 0] if i % 2 else [],
        })
    if phase == "v2":
        out = out[:10]
        for r in out:
            r["id"] += 1000
            r["added"] = "new %d" % r["id"]
    return out


def pb_message(cls, r):
    m = cls()
    for k in ("id", "flag", "i32", "s32", "s64", "u32", "u64", "f32", "f64", "sf32", "sf64", "fl", "db", "name", "raw",
              "color"):
        setattr(m, k, r[k])
    if r["ts"] is not None:
        m.ts.FromDatetime(r["ts"])
    if r["dur"] is not None:
        m.dur.FromTimedelta(r["dur"])
    for k in ("sv", "iv", "bv", "dv"):
        if r[k] is not None:
            getattr(m, k).value = r[k]
    if r["st"] is not None:
        m.st.update(r["st"])
    if r["addr"] is not None:
        m.addr.city = r["addr"]["city"]
        if r["addr"]["zip"] is not None:
            m.addr.zip = r["addr"]["zip"]
    m.nums.extend(r["nums"])
    m.tags.extend(r["tags"])
    for k, v in r["attrs"].items():
        m.attrs[k] = v
    for a in r["addrs"]:
        x = m.addrs.add(city=a["city"])
        if a["zip"] is not None:
            x.zip = a["zip"]
    for k in ("opt", "cs", "ci", "added"):
        if r.get(k) is not None:
            setattr(m, k, r[k])
    for t in r["tss"]:
        m.tss.add().FromDatetime(t)
    m.colors.extend(r["colors"])
    return m


def addr_json(a):
    return {"city": a["city"]} if a["zip"] is None else {"city": a["city"], "zip": a["zip"]}


def pb_expect(r):
    e = dict(r)
    e["u64"], e["f64"] = decimal.Decimal(r["u64"]), decimal.Decimal(r["f64"])
    e["fl"] = f32(r["fl"])
    e["color"] = COLORS[r["color"]]
    e["colors"] = [COLORS[c] for c in r["colors"]]
    e["st"] = None if r["st"] is None else ("json", r["st"])
    e["addr"] = None if r["addr"] is None else ("json", addr_json(r["addr"]))
    e["addrs"] = ("json", [addr_json(a) for a in r["addrs"]])
    e["attrs"] = ("json", r["attrs"])
    del e["dur"]
    return e


def pb_produce(brokers, registry, topic, phase):
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    cls, kcls = pb_classes(2 if phase == "v2" else 1)
    sr = SchemaRegistryClient({"url": registry, "timeout": 30})  # see registry_e2e.py
    ser = ProtobufSerializer(cls, sr, {"subject.name.strategy": topic_subject_name_strategy})
    # The key is the file's second message type: message index [1].
    kser = ProtobufSerializer(kcls, sr, {"subject.name.strategy": topic_subject_name_strategy})
    p = Producer({"bootstrap.servers": brokers, "linger.ms": 0})
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    rows = pb_rows(phase)
    for r in rows:
        p.produce(topic, key=kser(kcls(id=r["id"]), kctx), value=ser(pb_message(cls, r), vctx), partition=r["id"] % 2)
    if p.flush(30) != 0:
        raise RuntimeError("messages not delivered")
    return "%d messages" % len(rows)


# --- JSON Schema ----------------------------------------------------

JS_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Ev", "type": "object",
    "definitions": {"Addr": {"type": "object", "properties": {"city": {"type": "string"}}}},
    "properties": {
        "id": {"type": "integer"}, "flag": {"type": "boolean"}, "x": {"type": "number"},
        "name": {"type": "string"}, "color": {"type": "string", "enum": COLORS},
        "at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
        "uid": {"type": "string", "format": "uuid"}, "opt": {"type": ["string", "null"]},
        "nums": {"type": "array", "items": {"type": "integer"}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "addr": {"$ref": "#/definitions/Addr"}, "any": {},
    },
    "required": ["id"],
}
JS_KEY = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}


def js_schema(phase):
    s = json.loads(json.dumps(JS_V1))
    if phase == "v2":
        s["properties"]["added"] = {"type": ["string", "null"]}
    return s


def js_rows(phase):
    out = []
    for i in range(1, 21):
        out.append({
            "id": -2 ** 63 if i == 1 else i, "flag": i % 2 == 0, "x": i / 4 if i % 2 else 1e-3 * i,
            "name": "n ü \"%d\"\t\\ \U0001F600" % i, "color": COLORS[i % 3],
            "at": "2024-01-01T12:00:00.%06d+02:00" % i, "day": "2024-02-%02d" % i,
            "uid": str(uuid.UUID(int=i * 7919)), "opt": None if i % 3 == 0 else "o%d" % i,
            "nums": [i, -i, 2 ** 62] if i % 2 else [], "tags": ["a b", "", "c,d"] if i % 4 == 0 else ["t"],
            "addr": {"city": "C%d" % i}, "any": [i, {"k": None}, "s"] if i % 2 else i,
        })
        if i % 5 == 0:
            del out[-1]["opt"]  # absent: null
    if phase == "v2":
        out = out[:5]
        for k, r in enumerate(out):
            r["id"] = 1001 + k
            r["added"] = "new %d" % r["id"]
    return out


def js_expect(r):
    e = dict(r)
    e["opt"] = r.get("opt")
    e["at"] = dt.datetime.fromisoformat(r["at"]).astimezone(UTC)
    e["day"] = dt.date.fromisoformat(r["day"])
    e["uid"] = uuid.UUID(r["uid"]).bytes
    e["addr"] = ("json", r["addr"])
    e["any"] = ("json", r["any"])
    return e


def js_produce(brokers, registry, topic, phase):
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    sr = SchemaRegistryClient({"url": registry, "timeout": 30})  # see registry_e2e.py
    ser = JSONSerializer(json.dumps(js_schema(phase)), sr, conf={"subject.name.strategy": topic_subject_name_strategy})
    kser = JSONSerializer(json.dumps(JS_KEY), sr, conf={"subject.name.strategy": topic_subject_name_strategy})
    p = Producer({"bootstrap.servers": brokers, "linger.ms": 0})
    vctx = SerializationContext(topic, MessageField.VALUE)
    kctx = SerializationContext(topic, MessageField.KEY)
    rows = js_rows(phase)
    for r in rows:
        p.produce(topic, key=kser({"id": r["id"]}, kctx), value=ser(r, vctx), partition=0)
    if p.flush(30) != 0:
        raise RuntimeError("messages not delivered")
    return "%d messages" % len(rows)


# --- checking -------------------------------------------------------

def check(fmt, tables, topic, phases, perturb):
    rows = read_table(tables, topic)
    rowsf, expect = (pb_rows, pb_expect) if fmt == "pb" else (js_rows, js_expect)
    held = held_intervals(os.path.join(os.path.dirname(tables), "checkpoints")) if fmt == "pb" else {}
    want = {}
    for phase in phases:
        for r in rowsf(phase):
            want[r["id"]] = (r, phase == "v2")
    got = {r["id"]: r for r in rows}
    bad = []
    if len(rows) != len(want) or set(got) != set(want):
        bad.append("ids: got %d rows %s, want %s" % (len(rows), sorted(got), sorted(want)))
    for i, (r, v2) in sorted(want.items()):
        g = got.get(i)
        if g is None:
            continue
        e = expect(r)
        if perturb and i == sorted(want)[0]:
            e["name"] = "perturbed"
        if not v2 and "added" in g:
            e["added"] = None
        for k, v in e.items():
            gv = g.get(k, "<missing>")
            if isinstance(v, tuple) and v[0] == "json":
                ok = gv is not None and gv != "<missing>" and json.loads(gv) == v[1]
            else:
                ok = gv == v
            if not ok:
                bad.append("id %d %s: got %r, want %r" % (i, k, gv, v))
        if fmt == "pb":
            d = r["dur"]
            # Held cells name their record by its key: the framed key
            # message as JSON.
            gd = g.get("dur") if "dur" in g else held.get('{"id":%d}' % i)
            if hasattr(gd, "months"):
                gd = (gd.months, gd.days, gd.nanoseconds)
            wd = None if d is None else (0, 0, (d.days * 86400 + d.seconds) * 10 ** 9 + d.microseconds * 1000)
            if gd != wd:
                bad.append("id %d dur: got %r, want %r" % (i, gd, wd))
    if bad:
        raise RuntimeError("; ".join(bad[:20]))
    return "%d rows" % len(rows)


COMMAND_LIMIT = 240  # seconds


def main():
    for line in sys.stdin:
        w = line.split()
        # A command that hangs (a client library waiting on a server
        # without a timeout) prints every thread's stack and exits, so
        # the Go test fails saying where instead of waiting for its
        # package's deadline. Commands take seconds.
        faulthandler.dump_traceback_later(COMMAND_LIMIT, exit=True)
        try:
            if w[0] == "produce":
                out = (pb_produce if w[1] == "pb" else js_produce)(*w[2:6])
            elif w[0] == "check":
                out = check(w[1], w[2], w[3], w[4].split(","), len(w) > 5 and w[5] == "perturb")
            else:
                raise RuntimeError("unknown command " + w[0])
            print("ok " + out, flush=True)
        except Exception as e:  # noqa: BLE001 - the answer carries it
            print("error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")), flush=True)
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    main()
