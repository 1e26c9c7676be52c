//! Property tests over JSON documents and declared rows: no panic, every
//! row is output or quarantined (never both), every output batch conforms
//! to the schema the engine reports, and import(export(state)) behaves
//! exactly like the engine it was exported from.

use arrow_array::RecordBatch;
use openetl_engine::input::{self, RawRows};
use openetl_engine::rows::encode;
use openetl_engine::{Engine, PushOutput};
use proptest::prelude::*;

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        "[1-9][0-9]{18,40}".prop_map(|s| s),
        "-?[0-9]\\.[0-9]{10,40}".prop_map(|s| s),
        "[a-z\\\\\"é ]{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("\"2024-01-02T03:04:05Z\"".to_string()),
        Just("tru".to_string()), // invalid
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(("[a-c]", inner), 0..4).prop_map(|v| {
                let f: Vec<String> = v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", f.join(","))
            }),
        ]
    })
}

fn json_doc() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::collection::vec(("[a-e]", json_value()), 0..6).prop_map(|v| {
            let f: Vec<String> = v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("{{{}}}", f.join(","))
        }),
        1 => json_value(),
        1 => "[ -~]{0,20}",
    ]
}

const TYPES: &[(&str, &[&str])] = &[
    ("int2", &["1", "-32768", "32768", "x", ""]),
    (
        "int8",
        &["9223372036854775807", "9223372036854775808", "-5"],
    ),
    ("float4", &["1.5", "1e39", "NaN", "-Infinity"]),
    (
        "numeric(6,2)",
        &["1234.56", "12345.6", "1.234", "-0.01", "NaN"],
    ),
    ("numeric", &["1.5", "x", "NaN"]),
    ("bool", &["t", "f", "maybe"]),
    ("text", &["héllo", ""]),
    ("bytea", &["\\x00ff", "\\x0", "zz"]),
    (
        "date",
        &["2024-02-29", "2023-02-29", "infinity", "0001-01-01 BC"],
    ),
    ("time", &["13:14:15.5", "24:00:00"]),
    (
        "timestamptz",
        &["2024-01-02 03:04:05+02", "2024-01-02 03:04:05", "garbage"],
    ),
    ("interval", &["1 year 2 mons", "-00:00:01", "1 fortnight"]),
    ("uuid", &["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "nope"]),
    ("jsonb", &["{\"a\":1}", "{"]),
    ("_int4", &["{1,NULL,3}", "{{1}}", "{1,2147483648}", "{}"]),
    ("text[]", &["{\"a b\",c}", "{\"unterminated}"]),
];

fn row_cfg() -> String {
    let cols: Vec<String> = TYPES
        .iter()
        .enumerate()
        .map(|(i, (t, _))| format!(r#"{{"name":"c{i}","type":"{t}"}}"#))
        .collect();
    format!(
        r#"{{"lanes":3,"unsupported":["interval"],"naming":{{"case":"upper"}},"streams":[{{"name":"r","format":"row","columns":[{}]}}]}}"#,
        cols.join(",")
    )
}

/// A row: per column None (null) or an index into its value pool; or a
/// payload of raw bytes.
fn row_payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        9 => prop::collection::vec(prop::option::of(0usize..8), TYPES.len()).prop_map(|v| {
            let vals: Vec<Option<&[u8]>> = v
                .iter()
                .zip(TYPES)
                .map(|(x, (_, pool))| x.map(|i| pool[i % pool.len()].as_bytes()))
                .collect();
            encode(&vals)
        }),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
}

fn push(e: &mut Engine, stream: &str, rows: &[(u8, Vec<u8>, Vec<u8>)]) -> PushOutput {
    let rows: Vec<(u8, i64, &[u8], &[u8])> = rows
        .iter()
        .enumerate()
        .map(|(i, (op, k, p))| (*op, i as i64, &k[..], &p[..]))
        .collect();
    let batch = input::batch(&rows);
    let raw = RawRows::new(&batch).unwrap();
    let out = e.push(stream, &raw, 42).unwrap();
    let taken = out.record.as_ref().map_or(0, RecordBatch::num_rows);
    assert_eq!(
        taken + out.quarantined.len(),
        rows.len(),
        "rows in = out + quarantined"
    );
    let mut q: Vec<u32> = out.quarantined.iter().map(|q| q.row).collect();
    q.dedup();
    assert_eq!(q.len(), out.quarantined.len(), "a row quarantined twice");
    assert_eq!(*out.lane_offsets.last().unwrap(), taken);
    out
}

/// `dt` without the structs that have no fields (left out of the output,
/// their values held), `None` when nothing is left.
fn writable(dt: &arrow_schema::DataType) -> Option<arrow_schema::DataType> {
    use arrow_schema::{DataType, Field};
    use std::sync::Arc;
    match dt {
        DataType::Struct(f) => {
            let kept: Vec<Field> = f
                .iter()
                .filter_map(|f| {
                    writable(f.data_type()).map(|t| f.as_ref().clone().with_data_type(t))
                })
                .collect();
            (!kept.is_empty()).then(|| DataType::Struct(kept.into()))
        }
        DataType::List(e) => writable(e.data_type())
            .map(|t| DataType::List(Arc::new(e.as_ref().clone().with_data_type(t)))),
        t => Some(t.clone()),
    }
}

fn ops() -> impl Strategy<Value = u8> {
    prop_oneof![8 => Just(1u8), 2 => Just(2u8), 2 => Just(3u8), 1 => Just(9u8)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn json_documents(batches in prop::collection::vec(
        prop::collection::vec((ops(), "[0-9]{0,2}", json_doc()), 1..12), 1..4)) {
        // Naming rules, a hold-back, a stream option: all must survive
        // export/import (rules and unsupported types are config, not state).
        const CFG: &str = r#""lanes":2,"naming":{"max_len":10,"case":"lower","simple":true,"reserved":["a"]},"unsupported":["timestamptz"]"#;
        let mut e = Engine::from_config_json(
            format!(r#"{{{CFG},"streams":[{{"name":"s","timestamps":true}}]}}"#).as_bytes(),
        )
        .unwrap();
        let mut twin: Option<Engine> = None;
        for (bi, b) in batches.iter().enumerate() {
            let rows: Vec<(u8, Vec<u8>, Vec<u8>)> =
                b.iter().map(|(o, k, d)| (*o, k.clone().into_bytes(), d.clone().into_bytes())).collect();
            let out = push(&mut e, "s", &rows);
            if let Some(r) = &out.record {
                // The batch's schema is the reported one (less held
                // columns, under destination names) plus metadata.
                let cols: Vec<_> = e
                    .column_types("s")
                    .into_iter()
                    .filter(|(_, t)| !matches!(t, arrow_schema::DataType::Timestamp(_, Some(_))))
                    .filter_map(|(n, t)| writable(&t).map(|t| (n, t)))
                    .collect();
                prop_assert_eq!(r.num_columns(), cols.len() + 4);
                for (f, (_, ty)) in r.schema().fields().iter().zip(&cols) {
                    prop_assert_eq!(f.data_type(), ty);
                }
            }
            for h in e.held() {
                prop_assert!(out.quarantined.iter().all(|q| q.row != h.row), "held row quarantined");
            }
            if let Some(t) = twin.as_mut() {
                let o2 = push(t, "s", &rows);
                prop_assert_eq!(&out.record, &o2.record);
                prop_assert_eq!(&out.quarantined, &o2.quarantined);
                prop_assert_eq!(t.held(), e.held());
                prop_assert_eq!(t.changes(), e.changes());
                prop_assert_eq!(t.state(), e.state());
            }
            if bi == 0 {
                // import(export(s)) from here on must behave the same.
                let st = String::from_utf8(e.state()).unwrap();
                twin = Some(Engine::from_config_json(format!(r#"{{{CFG},"state":{st}}}"#).as_bytes()).unwrap());
            }
        }
    }

    #[test]
    fn declared_rows(batches in prop::collection::vec(
        prop::collection::vec((ops(), "[0-9]{0,2}", row_payload()), 1..12), 1..4)) {
        let mut e = Engine::from_config_json(row_cfg().as_bytes()).unwrap();
        let st = String::from_utf8(e.state()).unwrap();
        let mut twin = Engine::from_config_json(
            format!(r#"{{"lanes":3,"unsupported":["interval"],"naming":{{"case":"upper"}},"state":{st}}}"#)
                .as_bytes(),
        )
        .unwrap();
        for b in &batches {
            let b: Vec<(u8, Vec<u8>, Vec<u8>)> =
                b.iter().map(|(o, k, p)| (*o, k.clone().into_bytes(), p.clone())).collect();
            let out = push(&mut e, "r", &b);
            let o2 = push(&mut twin, "r", &b);
            prop_assert_eq!(&out.record, &o2.record);
            prop_assert_eq!(&out.quarantined, &o2.quarantined);
            prop_assert_eq!(e.held(), twin.held());
            if let Some(r) = &out.record {
                // The interval column is held back; names are upper case.
                prop_assert_eq!(r.num_columns(), TYPES.len() - 1 + 4);
                let first = r.schema().field(0).name().clone();
                prop_assert_eq!(first.as_str(), "C0");
            }
        }
        prop_assert_eq!(e.state(), twin.state());
    }
}
