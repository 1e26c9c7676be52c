//! Declared rows and schema policy through the public Rust API.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, IntervalUnit, TimeUnit};
use openetl_engine::input::{self, RawRows};
use openetl_engine::rows::encode;
use openetl_engine::{Engine, PushOutput, Reason};

fn engine(cfg: &str) -> Engine {
    Engine::from_config_json(cfg.as_bytes()).unwrap()
}

fn push(e: &mut Engine, stream: &str, rows: &[(u8, &[u8])]) -> PushOutput {
    let rows: Vec<(u8, i64, &[u8], &[u8])> = rows
        .iter()
        .enumerate()
        .map(|(i, (op, p))| (*op, i as i64, &b""[..], *p))
        .collect();
    let batch = input::batch(&rows);
    let raw = RawRows::new(&batch).unwrap();
    let out = e.push(stream, &raw, 0).unwrap();
    let taken = out.record.as_ref().map_or(0, |r| r.num_rows());
    assert_eq!(taken + out.quarantined.len(), rows.len());
    if let Some(r) = &out.record {
        // Every batch conforms to its schema (try_new checked it); the
        // declared columns keep their declared types.
        assert_eq!(r.schema().fields().len(), r.num_columns());
    }
    out
}

const PG: &str = r#"{"lanes":1,"streams":[{"name":"t","format":"row","types":"postgres","columns":[
 {"name":"i2","type":"int2"},{"name":"i4","type":"int4"},{"name":"i8","type":"int8"},
 {"name":"f4","type":"float4"},{"name":"f8","type":"float8"},{"name":"n","type":"numeric(10,2)"},
 {"name":"nu","type":"numeric"},{"name":"b","type":"bool"},{"name":"s","type":"varchar(20)"},
 {"name":"by","type":"bytea"},{"name":"d","type":"date"},{"name":"tm","type":"time"},
 {"name":"ttz","type":"timetz"},{"name":"ts","type":"timestamp"},{"name":"tstz","type":"timestamptz"},
 {"name":"iv","type":"interval"},{"name":"u","type":"uuid"},{"name":"j","type":"jsonb"},
 {"name":"e","type":"mood"},{"name":"a","type":"_int4"},{"name":"ta","type":"text[]"}]}]}"#;

fn pg_row(vals: &[Option<&str>]) -> Vec<u8> {
    let v: Vec<Option<&[u8]>> = vals.iter().map(|v| v.map(str::as_bytes)).collect();
    encode(&v)
}

fn good() -> Vec<Option<&'static str>> {
    vec![
        Some("-7"),
        Some("42"),
        Some("9223372036854775807"),
        Some("1.5"),
        Some("-2.25"),
        Some("12345678.90"),
        Some("3.14159265358979323846264338327950288"),
        Some("t"),
        Some("héllo"),
        Some("\\x00ff10"),
        Some("2024-02-29"),
        Some("13:14:15.5"),
        Some("13:14:15+05:30"),
        Some("2024-01-02 03:04:05.123456"),
        Some("2024-01-02 03:04:05+02"),
        Some("1 year 2 mons 3 days 04:05:06"),
        Some("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        Some(r#"{"k": [1, 2]}"#),
        Some("happy"),
        Some("{1,NULL,3}"),
        Some(r#"{"a,b",c}"#),
    ]
}

#[test]
fn postgres_types_exactly() {
    let mut e = engine(PG);
    let mut nulls = vec![None; 21];
    nulls[0] = Some("1");
    let rows = [pg_row(&good()), pg_row(&nulls)];
    let out = push(&mut e, "t", &[(1, &rows[0]), (2, &rows[1])]);
    assert!(out.quarantined.is_empty(), "{:?}", out.quarantined);
    let r: RecordBatch = out.record.unwrap();
    let ty = |n: &str| r.schema().field_with_name(n).unwrap().data_type().clone();
    assert_eq!(ty("i2"), DataType::Int16);
    assert_eq!(ty("n"), DataType::Decimal128(10, 2));
    assert_eq!(ty("nu"), DataType::Utf8);
    assert_eq!(ty("by"), DataType::Binary);
    assert_eq!(ty("tm"), DataType::Time64(TimeUnit::Microsecond));
    assert_eq!(
        ty("tstz"),
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert_eq!(ty("iv"), DataType::Interval(IntervalUnit::MonthDayNano));
    assert_eq!(ty("u"), DataType::FixedSizeBinary(16));
    assert!(matches!(ty("a"), DataType::List(f) if f.data_type() == &DataType::Int32));
    let c = |n: &str| r.column_by_name(n).unwrap();
    assert_eq!(c("i2").as_primitive::<Int16Type>().value(0), -7);
    assert_eq!(c("i8").as_primitive::<Int64Type>().value(0), i64::MAX);
    assert_eq!(c("n").as_primitive::<Decimal128Type>().value(0), 1234567890);
    assert_eq!(
        c("nu").as_string::<i32>().value(0),
        "3.14159265358979323846264338327950288"
    );
    assert!(c("b").as_boolean().value(0));
    assert_eq!(c("s").as_string::<i32>().value(0), "héllo");
    assert_eq!(c("by").as_binary::<i32>().value(0), &[0, 0xff, 0x10]);
    assert_eq!(c("d").as_primitive::<Date32Type>().value(0), 19782);
    assert_eq!(
        c("tm").as_primitive::<Time64MicrosecondType>().value(0),
        47_655_500_000
    );
    assert_eq!(c("ttz").as_string::<i32>().value(0), "13:14:15+05:30");
    assert_eq!(
        c("ts").as_primitive::<TimestampMicrosecondType>().value(0),
        1_704_164_645_123_456
    );
    assert_eq!(
        c("tstz")
            .as_primitive::<TimestampMicrosecondType>()
            .value(0),
        1_704_164_645_000_000 - 2 * 3_600_000_000
    );
    let iv = c("iv").as_primitive::<IntervalMonthDayNanoType>().value(0);
    assert_eq!(
        (iv.months, iv.days, iv.nanoseconds),
        (14, 3, 14_706_000_000_000)
    );
    assert_eq!(
        c("u").as_fixed_size_binary().value(0),
        0xa0eebc999c0b4ef8bb6d6bb9bd380a11u128.to_be_bytes()
    );
    assert_eq!(c("j").as_string::<i32>().value(0), r#"{"k": [1, 2]}"#);
    assert_eq!(c("e").as_string::<i32>().value(0), "happy");
    let a = c("a").as_list::<i32>();
    let a0 = a.value(0);
    let a0 = a0.as_primitive::<Int32Type>();
    assert_eq!(a0.len(), 3);
    assert_eq!((a0.value(0), a0.is_null(1), a0.value(2)), (1, true, 3));
    let ta = c("ta").as_list::<i32>().value(0);
    let ta = ta.as_string::<i32>();
    assert_eq!((ta.value(0), ta.value(1)), ("a,b", "c"));
    // Row 1: nulls everywhere but i2.
    for (i, f) in r.schema().fields().iter().enumerate().skip(1).take(20) {
        assert!(r.column(i).is_null(1), "{} is null", f.name());
    }
}

#[test]
fn postgres_values_conflicting_are_quarantined_out_of_range_held() {
    let cases: &[(usize, &str, Reason)] = &[
        (0, "40000", Reason::OutOfRange),
        (1, "x", Reason::TypeConflict),
        (5, "123.456", Reason::OutOfRange),
        (5, "123456789.00", Reason::OutOfRange),
        (5, "NaN", Reason::OutOfRange),
        (3, "1e39", Reason::OutOfRange),
        (9, "zz", Reason::TypeConflict),
        (10, "2023-02-29", Reason::TypeConflict),
        (10, "infinity", Reason::OutOfRange),
        (11, "24:00:00", Reason::OutOfRange),
        (13, "294276-12-31 23:59:59.999999", Reason::OutOfRange),
        (14, "infinity", Reason::OutOfRange),
        (14, "294276-12-31 23:59:59.999999+00", Reason::OutOfRange),
        (13, "2024-01-02 03:04:05+02", Reason::TypeConflict),
        (16, "not-a-uuid", Reason::TypeConflict),
        (17, "{", Reason::TypeConflict),
        (19, "{{1},{2}}", Reason::TypeConflict),
        (19, "{1,2147483648}", Reason::OutOfRange),
    ];
    let mut e = engine(PG);
    for (col, text, reason) in cases {
        let mut v = good();
        v[*col] = Some(text);
        let row = pg_row(&v);
        let out = push(&mut e, "t", &[(1, &row), (1, &pg_row(&good()))]);
        if *reason == Reason::TypeConflict {
            // Not a value of its type: the row is quarantined.
            assert_eq!(out.quarantined.len(), 1, "{col} {text}");
            assert_eq!(out.quarantined[0].row, 0);
            assert_eq!(
                out.quarantined[0].reason, *reason,
                "{col} {text}: {}",
                out.quarantined[0].detail
            );
            assert_eq!(out.record.unwrap().num_rows(), 1);
            assert!(e.held().is_empty(), "{col} {text}");
            continue;
        }
        // A value of its type its Arrow type can't hold: the cell is held,
        // the row lands with a null there.
        assert!(
            out.quarantined.is_empty(),
            "{col} {text}: {:?}",
            out.quarantined
        );
        let r = out.record.unwrap();
        assert_eq!(r.num_rows(), 2);
        assert!(r.column(*col).is_null(0), "{col} {text}");
        assert!(!r.column(*col).is_null(1), "{col} {text}");
        let other = if *col == 0 { 1 } else { 0 };
        assert!(!r.column(other).is_null(0), "the row's other cells land");
        let held = e.held();
        assert_eq!(held.len(), 1, "{col} {text}");
        let h = &held[0];
        assert_eq!((h.row, h.value.as_slice()), (0, text.as_bytes()));
        assert_eq!(h.column, r.schema().field(*col).name().as_str());
        let cell = h.cell.as_ref().expect("a cell hold has its reason");
        assert_eq!(cell.reason, Reason::OutOfRange, "{col} {text}");
        assert!(
            cell.detail.contains("out of range") || cell.detail.contains("fractional"),
            "{}",
            cell.detail
        );
    }
    // A row with a held cell and a value of the wrong type is quarantined
    // whole, and holds nothing.
    let mut v = good();
    v[11] = Some("24:00:00");
    v[16] = Some("not-a-uuid");
    let out = push(&mut e, "t", &[(1, &pg_row(&v)), (1, &pg_row(&good()))]);
    assert_eq!(out.quarantined.len(), 1);
    assert_eq!(out.quarantined[0].reason, Reason::TypeConflict);
    assert!(e.held().is_empty());
    // Malformed payloads, unchanged values, wrong counts.
    let mut unchanged = pg_row(&good()[..20]);
    unchanged.push(1);
    let short = pg_row(&good()[..20]);
    let mut long = pg_row(&good());
    long.push(0);
    let out = push(
        &mut e,
        "t",
        &[
            (1, &unchanged),
            (1, &short),
            (1, &long),
            (1, b"\x7f"),
            (3, b""),
        ],
    );
    let reasons: Vec<Reason> = out.quarantined.iter().map(|q| q.reason).collect();
    assert_eq!(
        reasons,
        vec![
            Reason::Unchanged,
            Reason::Parse,
            Reason::Parse,
            Reason::Parse
        ]
    );
    assert_eq!(
        out.record.unwrap().num_rows(),
        1,
        "a key-only delete is taken"
    );
}

#[test]
fn out_of_range_key_quarantines_its_row() {
    // A key cell can't be held: the row would land without its key.
    let cfg = r#"{"streams":[{"name":"k","format":"row","columns":[
      {"name":"id","type":"date","key":true},{"name":"t","type":"time"}]}]}"#;
    let mut e = engine(cfg);
    let out = push(
        &mut e,
        "k",
        &[
            (1, &encode(&[Some(b"infinity"), Some(b"01:00:00")])),
            (1, &encode(&[Some(b"2024-01-01"), Some(b"24:00:00")])),
        ],
    );
    assert_eq!(out.quarantined.len(), 1);
    assert_eq!(
        (out.quarantined[0].row, out.quarantined[0].reason),
        (0, Reason::OutOfRange)
    );
    assert_eq!(e.held().len(), 1);
    assert_eq!((e.held()[0].row, e.held()[0].column.as_str()), (1, "t"));
    // The key mark survives the state.
    assert!(
        String::from_utf8(e.state())
            .unwrap()
            .contains(r#""key":true"#)
    );
}

#[test]
fn mysql_types_exactly() {
    let cfg = r#"{"streams":[{"name":"m","format":"row","types":"mysql","columns":[
      {"name":"u","type":"bigint unsigned"},{"name":"t","type":"tinyint(1)"},
      {"name":"d","type":"decimal(20,4)"},{"name":"f","type":"float"},{"name":"bit","type":"bit(8)"},
      {"name":"dt","type":"datetime(6)"},{"name":"ts","type":"timestamp"},{"name":"tm","type":"time"},
      {"name":"y","type":"year"},{"name":"bl","type":"blob"},{"name":"j","type":"json"},
      {"name":"e","type":"enum('a','b')"},{"name":"s","type":"set('x','y')"}]}]}"#;
    let mut e = engine(cfg);
    let row = encode(&[
        Some(b"18446744073709551615"),
        Some(b"1"),
        Some(b"-1234567890123456.7890"),
        Some(b"0.5"),
        Some(b"255"),
        Some(b"2024-01-02 03:04:05.000001"),
        Some(b"1970-01-01 00:00:01"),
        Some(b"-838:59:59"),
        Some(b"2024"),
        Some(b"\x00\xff"),
        Some(b"[1]"),
        Some(b"b"),
        Some(b"x,y"),
    ]);
    let out = push(&mut e, "m", &[(1, &row)]);
    assert!(out.quarantined.is_empty(), "{:?}", out.quarantined);
    let r = out.record.unwrap();
    let c = |n: &str| r.column_by_name(n).unwrap();
    assert_eq!(c("u").as_primitive::<UInt64Type>().value(0), u64::MAX);
    assert_eq!(c("t").as_primitive::<Int8Type>().value(0), 1);
    assert_eq!(
        c("d").as_primitive::<Decimal128Type>().value(0),
        -12345678901234567890
    );
    assert_eq!(c("f").as_primitive::<Float32Type>().value(0), 0.5);
    assert_eq!(c("bit").as_primitive::<UInt64Type>().value(0), 255);
    assert_eq!(
        c("ts").as_primitive::<TimestampMicrosecondType>().value(0),
        1_000_000
    );
    assert_eq!(
        c("tm").as_primitive::<DurationMicrosecondType>().value(0),
        -3_020_399_000_000
    );
    assert_eq!(c("y").as_primitive::<Int16Type>().value(0), 2024);
    assert_eq!(c("bl").as_binary::<i32>().value(0), b"\x00\xff");
    assert_eq!(c("s").as_string::<i32>().value(0), "x,y");
    let bad = encode(&[
        Some(b"-1"),
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ]);
    let out = push(&mut e, "m", &[(1, &bad)]);
    assert!(out.quarantined.is_empty());
    assert!(out.record.unwrap().column(0).is_null(0));
    let held = e.held();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].value, b"-1");
    assert_eq!(
        held[0].cell.as_ref().map(|c| c.reason),
        Some(Reason::OutOfRange)
    );
    // Zero dates: no Arrow date holds one; only the cell is held.
    let mut zero: Vec<Option<&[u8]>> = vec![None; 13];
    zero[5] = Some(b"0000-00-00 00:00:00");
    let out = push(&mut e, "m", &[(1, &encode(&zero))]);
    assert!(out.quarantined.is_empty());
    assert_eq!(e.held().len(), 1);
    assert_eq!(e.held()[0].column, "dt");
}

#[test]
fn declared_state_round_trips() {
    let mut e = engine(PG);
    let s = e.state();
    let cfg = format!(r#"{{"state":{}}}"#, std::str::from_utf8(&s).unwrap());
    let mut e2 = engine(&cfg);
    assert_eq!(e2.state(), s);
    let row = pg_row(&good());
    let a = push(&mut e, "t", &[(1, &row)]).record.unwrap();
    let b = push(&mut e2, "t", &[(1, &row)]).record.unwrap();
    assert_eq!(a, b);
}

#[test]
fn schema_policies() {
    let cfg = r#"{"streams":[{"name":"f","policy":"freeze"},{"name":"d","policy":"discard"}]}"#;
    let mut e = engine(r#"{}"#);
    push(&mut e, "f", &[(1, br#"{"a":1}"#)]);
    push(&mut e, "d", &[(1, br#"{"a":1}"#)]);
    let changes = e.changes().to_vec();
    assert_eq!(changes.len(), 1);
    assert_eq!(
        (changes[0].kind, changes[0].column.as_str(), changes[0].to),
        ("added", "a", "int64")
    );
    let state = String::from_utf8(e.state()).unwrap();
    let mut e = engine(&cfg.replace("]}", &format!("],\"state\":{state}}}")));

    let out = push(
        &mut e,
        "f",
        &[
            (1, br#"{"a":2}"#),
            (1, br#"{"a":2,"b":1}"#),
            (1, br#"{"a":2.5}"#),
        ],
    );
    let reasons: Vec<Reason> = out.quarantined.iter().map(|q| q.reason).collect();
    assert_eq!(reasons, vec![Reason::TypeConflict, Reason::TypeConflict]);
    let kinds: Vec<(&str, &str)> = e
        .changes()
        .iter()
        .map(|c| (c.kind, c.column.as_str()))
        .collect();
    assert_eq!(kinds, vec![("blocked", "b"), ("blocked", "a")]);
    assert_eq!(out.record.unwrap().num_columns(), 1 + 4);

    let out = push(
        &mut e,
        "d",
        &[(1, br#"{"a":2,"b":1}"#), (1, br#"{"a":2.5}"#)],
    );
    assert!(out.quarantined.is_empty());
    let r = out.record.unwrap();
    assert!(r.column_by_name("b").is_none());
    assert_eq!(
        r.column_by_name("a").unwrap().data_type(),
        &DataType::Float64
    );
    let kinds: Vec<(&str, &str)> = e
        .changes()
        .iter()
        .map(|c| (c.kind, c.column.as_str()))
        .collect();
    assert_eq!(kinds, vec![("widened", "a"), ("discarded", "b")]);
    // The policies are in the state.
    let st = String::from_utf8(e.state()).unwrap();
    assert!(
        st.contains(r#""policy":"freeze""#) && st.contains(r#""policy":"discard""#),
        "{st}"
    );
}

#[test]
fn declared_row_id_vector() {
    // The last vector of testdata/openetl_id_vectors.json: a declared row
    // without a key hashes its row payload.
    let mut e = engine(
        r#"{"streams":[{"name":"orders","format":"row","columns":[
        {"name":"id","type":"int4"},{"name":"n","type":"text"},{"name":"b","type":"bool"}]}]}"#,
    );
    let p = encode(&[Some(b"42"), None, Some(b"t")]);
    assert_eq!(p, b"\x0442\x00\x03t");
    let batch = input::batch(&[(1u8, 9i64, &b""[..], &p[..])]);
    let raw = RawRows::new(&batch).unwrap();
    let r = e.push("orders", &raw, 0).unwrap().record.unwrap();
    let ids = r.column_by_name("_openetl_id").unwrap().as_string::<i32>();
    assert_eq!(ids.value(0), "dcb5c09f52253044b1936ddd79f36702");
}

#[test]
fn destination_names_are_stable() {
    let cfg = r#"{"naming":{"max_len":12,"case":"lower","simple":true,"reserved":["order"]},
      "streams":[{"name":"Order","format":"row","columns":[{"name":"Id","type":"int4"},{"name":"ID","type":"int4"},{"name":"first name","type":"text"}]}]}"#;
    let mut e = engine(cfg);
    let row = encode(&[Some(b"1"), Some(b"2"), Some(b"x")]);
    let r = push(&mut e, "Order", &[(1, &row)]).record.unwrap();
    let names: Vec<String> = r
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names[..4], ["id", "id_2", "first_name", "_openetl_id"]);
    assert_eq!(r.schema().metadata()["openetl.table"], "order_");
    // JSON streams: another stream folding to the same table name gets a suffix.
    let d = push(
        &mut e,
        "ORDER",
        &[(1, br#"{"Zip Code":1,"zip_code":2,"order":3}"#)],
    );
    let r = d.record.unwrap();
    let names: Vec<String> = r
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names[..3], ["zip_code", "zip_code_2", "order_"]);
    assert_eq!(r.schema().metadata()["openetl.table"], "order__2");
    // Names survive a restart with other rules: once given, never changed.
    let st = String::from_utf8(e.state()).unwrap();
    let mut e2 = engine(&format!(r#"{{"naming":{{"case":"upper"}},"state":{st}}}"#));
    let r2 = push(&mut e2, "ORDER", &[(1, br#"{"order":3,"new":1}"#)])
        .record
        .unwrap();
    let names: Vec<String> = r2
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names[..4], ["zip_code", "zip_code_2", "order_", "NEW"]);
    assert_eq!(r2.schema().metadata()["openetl.table"], "order__2");
    // Without rules nothing is renamed and there is no table metadata.
    let mut plain = engine("{}");
    let r = push(&mut plain, "s", &[(1, br#"{"A b":1}"#)])
        .record
        .unwrap();
    assert_eq!(r.schema().field(0).name(), "A b");
    assert!(r.schema().metadata().is_empty());
}

#[test]
fn names_given_ahead_follow_the_configured_order() {
    // Two streams fold to one table name: the one listed first in
    // "tables" gets it whichever stream's rows come first, and a declared
    // stream's columns are named before its first push.
    let cfg = r#"{"naming":{"case":"lower","simple":true},"tables":["orders","Orders"],
      "streams":[{"name":"Orders","format":"row","columns":[{"name":"Id","type":"int4"},{"name":"ID","type":"int4"}]}]}"#;
    let e = engine(cfg);
    let st: serde_json::Value = serde_json::from_slice(&e.state()).unwrap();
    let names = |s: &str| {
        st["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == s)
            .unwrap()["names"]
            .clone()
    };
    assert_eq!(names("orders")["table"], "orders");
    assert_eq!(names("Orders")["table"], "orders_2");
    assert_eq!(
        names("Orders")["columns"],
        serde_json::json!([["Id", "id"], ["ID", "id_2"]])
    );
    let mut e = e;
    let row = encode(&[Some(b"1"), Some(b"2")]);
    let r = push(&mut e, "Orders", &[(1, &row)]).record.unwrap();
    assert_eq!(r.schema().metadata()["openetl.table"], "orders_2");
    assert_eq!(r.schema().field(1).name(), "id_2");
    let d = push(&mut e, "orders", &[(1, br#"{"a":1}"#)]);
    assert_eq!(
        d.record.unwrap().schema().metadata()["openetl.table"],
        "orders"
    );
    // Names already given (in the state) are kept: the order applies only
    // to streams without one.
    let st = String::from_utf8(e.state()).unwrap();
    let again = engine(&format!(
        r#"{{"naming":{{"case":"lower","simple":true}},"tables":["Orders","orders","ORDERS"],"state":{st}}}"#
    ));
    let st: serde_json::Value = serde_json::from_slice(&again.state()).unwrap();
    let table = |s: &str| {
        st["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == s)
            .unwrap()["names"]["table"]
            .clone()
    };
    assert_eq!(table("Orders"), "orders_2");
    assert_eq!(table("orders"), "orders");
    assert_eq!(table("ORDERS"), "orders_3");
    assert!(Engine::from_config_json(br#"{"tables":[""]}"#).is_err());
}

#[test]
fn unsupported_types_are_held_and_released() {
    let cfg = r#"{"unsupported":["interval","struct"],"streams":[{"name":"t","format":"row","columns":[
      {"name":"id","type":"int4"},{"name":"iv","type":"interval"}]}]}"#;
    let mut e = engine(cfg);
    let rows = [
        encode(&[Some(b"1"), Some(b"1 day")]),
        encode(&[Some(b"2"), None]),
        encode(&[Some(b"3"), Some(b"1 fortnight")]),
    ];
    let out = push(&mut e, "t", &[(1, &rows[0]), (1, &rows[1]), (1, &rows[2])]);
    assert_eq!(
        out.quarantined.len(),
        1,
        "a bad held value still quarantines its row"
    );
    let r = out.record.unwrap();
    assert!(r.column_by_name("iv").is_none(), "held column not written");
    assert_eq!(r.num_columns(), 1 + 4);
    let held = e.held().to_vec();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (
            held[0].row,
            held[0].column.as_str(),
            held[0].value.as_slice()
        ),
        (0, "iv", &b"1 day"[..])
    );
    let a = e.release("t", "iv", &[b"1 day", b"2 mons"]).unwrap();
    let iv = a.as_primitive::<IntervalMonthDayNanoType>();
    assert_eq!((iv.value(0).days, iv.value(1).months), (1, 2));
    assert!(e.release("t", "iv", &[b"nope"]).is_err());

    let out = push(
        &mut e,
        "j",
        &[
            (1, br#"{"a":1,"s":{"x":"y"}}"#),
            (1, br#"{"a":2,"s":null}"#),
        ],
    );
    let r = out.record.unwrap();
    assert!(r.column_by_name("s").is_none());
    let held = e.held().to_vec();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].value, br#"{"x":"y"}"#);
    let a = e.release("j", "s", &[br#"{"x":"z"}"#]).unwrap();
    assert_eq!(a.data_type(), &e.column_types("j")[1].1);
    // A push without held values clears them.
    push(&mut e, "j", &[(1, br#"{"a":3}"#)]);
    assert!(e.held().is_empty());
}

#[test]
fn keyed_streams_need_keys() {
    let mut e = engine(
        r#"{"streams":[{"name":"k","keyed":true},{"name":"r","format":"row","keyed":true,"columns":[{"name":"id","type":"int4"}]}]}"#,
    );
    let batch = input::batch(&[
        (1u8, 1i64, &b"1"[..], &br#"{"a":1}"#[..]),
        (1, 2, b"", br#"{"a":2}"#),
        (3, 3, b"", b""),
    ]);
    let out = e.push("k", &RawRows::new(&batch).unwrap(), 0).unwrap();
    let reasons: Vec<(u32, Reason)> = out.quarantined.iter().map(|q| (q.row, q.reason)).collect();
    assert_eq!(reasons, [(1, Reason::MissingKey), (2, Reason::MissingKey)]);
    let row = encode(&[Some(b"1")]);
    let batch = input::batch(&[(1u8, 1i64, &b""[..], &row[..]), (1, 2, b"1", &row[..])]);
    let out = e.push("r", &RawRows::new(&batch).unwrap(), 0).unwrap();
    assert_eq!(out.quarantined.len(), 1);
    assert_eq!(out.quarantined[0].reason, Reason::MissingKey);
    assert!(
        String::from_utf8(e.state())
            .unwrap()
            .contains(r#""keyed":true"#)
    );
}

/// Enum columns (MySQL's `enum('a','b')`, and Postgres enums as the
/// Postgres source declares them) are utf8 marked in the field metadata;
/// the mark names no labels, so a declaration with more labels (an
/// `ALTER TYPE ... ADD VALUE` seen at the next discovery) gives the same
/// schema, and a label the declaration doesn't list is still taken.
#[test]
fn enums_are_marked_in_field_metadata() {
    use openetl_engine::decl::{ENUM, LOGICAL_TYPE_KEY};
    let cfg = |types: &str, labels: &str| {
        format!(
            r#"{{"naming":{{"case":"lower"}},"streams":[{{"name":"t","format":"row","types":"{types}","columns":[
             {{"name":"id","type":"int4"}},{{"name":"Mood","type":"enum({labels})"}},
             {{"name":"other","type":"mood"}},{{"name":"s","type":"set('a','b')"}}]}}]}}"#
        )
    };
    let row = pg_row(&[Some("1"), Some("happy"), Some("x"), Some("a,b")]);
    let late = pg_row(&[Some("2"), Some("ecstatic"), None, None]);
    let nul = pg_row(&[Some("3"), None, None, None]);
    for types in ["postgres", "mysql"] {
        let mut e = engine(&cfg(types, "'sad','ok','happy'"));
        let r = push(&mut e, "t", &[(1, &row), (1, &late), (1, &nul)])
            .record
            .unwrap();
        let schema = r.schema();
        let f = schema.field(1);
        assert_eq!(f.name(), "mood", "{types}: renamed, metadata kept");
        assert_eq!(f.data_type(), &DataType::Utf8);
        assert_eq!(
            f.metadata().get(LOGICAL_TYPE_KEY).map(String::as_str),
            Some(ENUM),
            "{types}"
        );
        for (i, field) in schema.fields().iter().enumerate() {
            if i != 1 {
                assert!(field.metadata().is_empty(), "{types}: {}", field.name());
            }
        }
        let m = r.column(1).as_string::<i32>();
        assert_eq!(m.value(0), "happy");
        assert_eq!(m.value(1), "ecstatic");
        assert!(m.is_null(2));
        // A label added to the type: the next discovery declares it, the
        // state's schema is replaced, the output schema is the same.
        let st = String::from_utf8(e.state()).unwrap();
        let added = cfg(types, "'sad','ok','happy','ecstatic'");
        let added = format!(
            r#"{}, "state":{st}}}"#,
            added.trim_end().trim_end_matches('}')
        );
        let mut e2 = engine(&added);
        let r2 = push(&mut e2, "t", &[(1, &late)]).record.unwrap();
        assert_eq!(r2.schema(), schema, "{types}");
        // And a state restored as it was gives the same schema too.
        let mut e3 = engine(&format!(r#"{{"state":{st}}}"#));
        assert_eq!(
            push(&mut e3, "t", &[(1, &row)]).record.unwrap().schema(),
            schema
        );
    }
    // Invalid UTF-8 in an enum is a type conflict, like any utf8 column.
    let mut e = engine(&cfg("mysql", "'a'"));
    let bad = encode(&[Some(b"1"), Some(b"\xff"), None, None]);
    let out = push(&mut e, "t", &[(1, &bad)]);
    assert_eq!(out.quarantined[0].reason, Reason::TypeConflict);
}

#[test]
fn lists_of_unsupported_types_are_held() {
    // A list of a type the destination can't take (interval[] into
    // Parquet) is held like the type itself, with its text.
    let cfg = r#"{"unsupported":["interval"],"streams":[{"name":"t","format":"row","columns":[
      {"name":"id","type":"int4"},{"name":"ivs","type":"_interval"}]}]}"#;
    let mut e = engine(cfg);
    let row = encode(&[Some(b"1"), Some(br#"{"1 day","2 mons"}"#)]);
    let out = push(&mut e, "t", &[(1, &row)]);
    let r = out.record.unwrap();
    assert!(r.column_by_name("ivs").is_none(), "held column not written");
    let held = e.held().to_vec();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].column.as_str(), held[0].value.as_slice()),
        ("ivs", &br#"{"1 day","2 mons"}"#[..])
    );
}

#[test]
fn empty_objects_are_released_as_written() {
    // A column that has only seen empty objects has no type yet: its
    // values are held, and released once it has one, at the type the
    // destination gets (here without the only-empty field p).
    let mut e = engine("{}");
    let out = push(&mut e, "j", &[(1, br#"{"o":{}}"#)]);
    assert!(out.record.unwrap().column_by_name("o").is_none());
    assert_eq!(e.held().len(), 1);
    assert!(e.release("j", "o", &[b"{}"]).is_err());
    push(&mut e, "j", &[(1, br#"{"o":{"a":1,"p":{}}}"#)]);
    let a = e.release("j", "o", &[b"{}", br#"{"a":2}"#]).unwrap();
    let s = a.as_struct();
    assert_eq!(s.num_columns(), 1, "{:?}", s.data_type());
    assert_eq!(s.column(0).as_primitive::<Int64Type>().value(1), 2);
}
