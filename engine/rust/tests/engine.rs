//! Engine behaviour through the public Rust API and the C surface.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::DataType;
use openetl_engine::infer::ColumnType;
use openetl_engine::input::{self, RawRows};
use openetl_engine::{Config, Engine, PushOutput, Reason, meta, route};

fn engine(lanes: u32) -> Engine {
    Engine::new(
        Config {
            lanes,
            max_document_bytes: 1024,
            ..Config::default()
        },
        None,
    )
    .unwrap()
}

fn push(e: &mut Engine, stream: &str, docs: &[&str]) -> PushOutput {
    let rows: Vec<(u8, i64, &str, &str)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (1u8, i as i64, "", *d))
        .collect();
    push_rows(e, stream, &rows)
}

fn push_rows(e: &mut Engine, stream: &str, rows: &[(u8, i64, &str, &str)]) -> PushOutput {
    let batch = input::batch(rows);
    let raw = RawRows::new(&batch).unwrap();
    let out = e.push(stream, &raw, 1_700_000_000_000_000).unwrap();
    let taken = out.record.as_ref().map_or(0, |r| r.num_rows());
    assert_eq!(
        taken + out.quarantined.len(),
        rows.len(),
        "every row is output or quarantined"
    );
    out
}

fn names(r: &RecordBatch) -> Vec<String> {
    r.schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

fn col<'a>(r: &'a RecordBatch, name: &str) -> &'a dyn Array {
    r.column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_ref()
}

fn utf8(r: &RecordBatch, name: &str) -> Vec<Option<String>> {
    col(r, name)
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

#[test]
fn documents_become_columns() {
    // Nested values as JSON text (the stream option); structs and lists
    // are in nested_values_become_structs_and_lists.
    let mut e = Engine::from_config_json(
        br#"{"max_document_bytes":1024,"streams":[{"name":"orders","nested_text":true}]}"#,
    )
    .unwrap();
    let out = push(
        &mut e,
        "orders",
        &[
            r#"{"id":1,"name":"a\"b","price":9.5,"ok":true,"tags":["x",1],"addr":{"city":"Paris"},"none":null}"#,
            r#"{"id":2,"price":10,"name":"é"}"#,
        ],
    );
    let r = out.record.unwrap();
    assert_eq!(
        names(&r),
        [
            "id",
            "name",
            "price",
            "ok",
            "tags",
            "addr",
            "none",
            "_openetl_id",
            "_openetl_op",
            "_openetl_seq",
            "_openetl_synced_at"
        ]
    );
    let types: Vec<DataType> = r
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types[..7],
        [
            DataType::Int64,
            DataType::Utf8,
            DataType::Float64,
            DataType::Boolean,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Null
        ]
    );
    assert!(r.schema().fields()[..7].iter().all(|f| f.is_nullable()));
    let id = col(&r, "id").as_primitive::<Int64Type>();
    assert_eq!(id.values(), &[1, 2]);
    assert_eq!(utf8(&r, "name"), [Some("a\"b".into()), Some("é".into())]);
    let price = col(&r, "price").as_primitive::<Float64Type>();
    assert_eq!(price.values(), &[9.5, 10.0]);
    let ok = col(&r, "ok").as_boolean();
    assert!(ok.value(0));
    assert!(ok.is_null(1));
    assert_eq!(utf8(&r, "tags"), [Some(r#"["x",1]"#.into()), None]);
    assert_eq!(utf8(&r, "addr"), [Some(r#"{"city":"Paris"}"#.into()), None]);
    assert_eq!(
        col(&r, "none").null_count(),
        0,
        "a null-typed column has no validity"
    );
    assert_eq!(col(&r, "none").logical_null_count(), 2);
    assert_eq!(
        utf8(&r, "_openetl_op"),
        [Some("insert".into()), Some("insert".into())]
    );
    assert_eq!(
        col(&r, "_openetl_seq").as_primitive::<Int64Type>().values(),
        &[0, 1]
    );
    let ts = col(&r, "_openetl_synced_at").as_primitive::<TimestampMicrosecondType>();
    assert_eq!(ts.values(), &[1_700_000_000_000_000, 1_700_000_000_000_000]);
    assert_eq!(
        r.schema()
            .field_with_name("_openetl_synced_at")
            .unwrap()
            .data_type(),
        &DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into()))
    );
    assert_eq!(out.lane_offsets, [0, 2]);
    assert!(out.quarantined.is_empty());
}

#[test]
fn widening_across_batches() {
    let mut e = engine(1);
    let r = push(&mut e, "s", &[r#"{"a":1,"b":true,"c":null}"#])
        .record
        .unwrap();
    assert_eq!(r.schema().field(0).data_type(), &DataType::Int64);
    assert_eq!(r.schema().field(1).data_type(), &DataType::Boolean);
    assert_eq!(r.schema().field(2).data_type(), &DataType::Null);

    let r = push(&mut e, "s", &[r#"{"a":2.5,"c":false}"#, r#"{"a":3,"b":7}"#])
        .record
        .unwrap();
    assert_eq!(names(&r)[..3], ["a", "b", "c"]);
    assert_eq!(r.schema().field(0).data_type(), &DataType::Float64);
    assert_eq!(
        r.schema().field(1).data_type(),
        &DataType::Utf8,
        "bool with a number is utf8"
    );
    assert_eq!(r.schema().field(2).data_type(), &DataType::Boolean);
    assert_eq!(
        col(&r, "a").as_primitive::<Float64Type>().values(),
        &[2.5, 3.0]
    );
    assert_eq!(utf8(&r, "b"), [None, Some("7".into())]);

    // Never narrows: an int after float stays float; absent columns stay.
    let r = push(&mut e, "s", &[r#"{"d":"x","a":4}"#]).record.unwrap();
    assert_eq!(names(&r)[..4], ["a", "b", "c", "d"]);
    assert_eq!(r.schema().field(0).data_type(), &DataType::Float64);
    assert_eq!(r.schema().field(1).data_type(), &DataType::Utf8);
    assert_eq!(col(&r, "a").as_primitive::<Float64Type>().values(), &[4.0]);
    assert!(col(&r, "b").is_null(0));
    assert!(col(&r, "c").is_null(0));

    // Numbers written to a utf8 column keep their JSON text.
    let r = push(
        &mut e,
        "s",
        &[
            r#"{"b":1.50e3,"e":12}"#,
            r#"{"b":"t","e":123456789012345678901234567890}"#,
            r#"{"e":-5}"#,
        ],
    )
    .record
    .unwrap();
    assert_eq!(
        utf8(&r, "b"),
        [Some("1.50e3".into()), Some("t".into()), None]
    );
    // An integer beyond i64 with int64s: decimal128(38, 0), exact.
    assert_eq!(
        col(&r, "e")
            .as_primitive::<arrow_array::types::Decimal128Type>()
            .values(),
        &[12, 123456789012345678901234567890, -5]
    );
    assert_eq!(
        r.schema().field_with_name("e").unwrap().data_type(),
        &DataType::Decimal128(38, 0)
    );
    assert_eq!(
        e.columns("s").iter().map(|c| c.1).collect::<Vec<_>>(),
        [
            ColumnType::Float64,
            ColumnType::Utf8,
            ColumnType::Bool,
            ColumnType::Utf8,
            ColumnType::Decimal {
                scale: 0,
                int_digits: 30
            }
        ]
    );
    // A scale that no longer fits 38 digits with the integer digits: utf8.
    let r = push(&mut e, "s", &[r#"{"e":0.12345678901234567890}"#])
        .record
        .unwrap();
    assert_eq!(
        r.schema().field_with_name("e").unwrap().data_type(),
        &DataType::Utf8
    );
    assert_eq!(utf8(&r, "e"), [Some("0.12345678901234567890".into())]);
    // Streams are independent.
    let r = push(&mut e, "t", &[r#"{"a":"x"}"#]).record.unwrap();
    assert_eq!(names(&r)[..1], ["a"]);
    assert_eq!(r.schema().field(0).data_type(), &DataType::Utf8);
}

#[test]
fn quarantine_reasons() {
    let mut e = engine(1);
    let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(2000));
    let deep = format!(r#"{{"a":{}{}}}"#, "[".repeat(70), "]".repeat(70));
    let rows: Vec<(u8, i64, &str, &str)> = vec![
        (1, 0, "", r#"{"ok":1}"#),
        (1, 1, "", r#"["secret"]"#),
        (1, 2, "", r#"{"ok":"secret"#),
        (9, 3, "", r#"{"ok":2}"#),
        (1, 4, "", &big),
        (1, 5, "", &deep),
        (1, 6, "", r#"{"new":1,"_openetl_id":"x"}"#),
        (1, 7, "", r#"{"ok":1,"ok":2}"#),
        (1, 8, "", ""),
        (3, 9, "k", ""),
        (1, 10, "", r#"{"ok":"\ud800"}"#),
        (2, 11, "", r#"{"ok":3}"#),
    ];
    let out = push_rows(&mut e, "s", &rows);
    let got: Vec<(u32, Reason)> = out.quarantined.iter().map(|q| (q.row, q.reason)).collect();
    assert_eq!(
        got,
        [
            (1, Reason::Parse),
            (2, Reason::Parse),
            (3, Reason::Parse),
            (4, Reason::TooLarge),
            (5, Reason::TooDeep),
            (6, Reason::Parse),
            (7, Reason::Parse),
            (8, Reason::Parse),
            (10, Reason::Parse),
        ]
    );
    for q in &out.quarantined {
        assert!(
            !q.detail.contains("secret"),
            "detail leaks row data: {}",
            q.detail
        );
        assert!(!q.detail.is_empty());
    }
    let detail = |row: u32| {
        out.quarantined
            .iter()
            .find(|q| q.row == row)
            .unwrap()
            .detail
            .as_str()
    };
    assert!(
        detail(1).contains("not a JSON object: found an array"),
        "{}",
        detail(1)
    );
    assert!(detail(3).contains("unknown op code 9"), "{}", detail(3));
    assert!(
        detail(4).contains("over the limit of 1024 bytes"),
        "{}",
        detail(4)
    );
    assert!(detail(6).contains("reserved"), "{}", detail(6));
    assert!(
        detail(7).contains("duplicate field \"ok\""),
        "{}",
        detail(7)
    );
    let r = out.record.unwrap();
    // The rejected row 6 added no column "new".
    assert_eq!(names(&r)[..1], ["ok"]);
    assert_eq!(r.num_columns(), 5);
    assert_eq!(
        col(&r, "_openetl_seq").as_primitive::<Int64Type>().values(),
        &[0, 9, 11]
    );
    assert_eq!(
        utf8(&r, "_openetl_op"),
        [
            Some("insert".into()),
            Some("delete".into()),
            Some("update".into())
        ]
    );
    assert_eq!(
        col(&r, "ok")
            .as_primitive::<Int64Type>()
            .iter()
            .collect::<Vec<_>>(),
        [Some(1), None, Some(3)]
    );

    let qb = openetl_engine::quarantine::batch(&out.quarantined)
        .unwrap()
        .unwrap();
    assert_eq!(qb.num_rows(), 9);
    assert_eq!(qb.column(1).as_string::<i32>().value(3), "too_large");
    assert_eq!(qb.column(1).as_string::<i32>().value(4), "too_deep");
}

#[test]
fn all_rows_quarantined_gives_no_record() {
    let mut e = engine(2);
    let out = push(&mut e, "s", &["nope", "{"]);
    assert!(out.record.is_none());
    assert_eq!(out.lane_offsets, [0, 0, 0]);
    assert_eq!(out.quarantined.len(), 2);
    let out = push(&mut e, "s", &[]);
    assert!(out.record.is_none());
}

#[test]
fn id_column_matches_vectors() {
    let mut e = engine(1);
    let rows: Vec<(u8, i64, &str, &str)> = vec![
        (1, 7, "42", r#"{"id":42}"#),
        (1, 7, "", r#"{"id":42}"#),
        (2, 8, "42", r#"{"id":42}"#),
    ];
    let r = push_rows(&mut e, "orders", &rows).record.unwrap();
    assert_eq!(
        utf8(&r, "_openetl_id"),
        [
            Some("79f31045bf5ab5655cdd3b5607862643".into()),
            Some("0a203a32206444d5c896477c05649d92".into()),
            Some("612569515ae994aa12ef4bd465665389".into()),
        ]
    );
}

#[test]
fn routing_groups_lanes() {
    let lanes = 4u32;
    let mut e = engine(lanes);
    let keys: Vec<String> = (0..200).map(|i| format!("key-{}", i % 37)).collect();
    let docs: Vec<String> = (0..200).map(|i| format!(r#"{{"i":{i}}}"#)).collect();
    let rows: Vec<(u8, i64, &str, &str)> = (0..200)
        .map(|i| {
            (
                1u8,
                i as i64,
                if i % 5 == 0 { "" } else { keys[i].as_str() },
                docs[i].as_str(),
            )
        })
        .collect();
    let out = push_rows(&mut e, "s", &rows);
    let r = out.record.unwrap();
    assert_eq!(out.lane_offsets.len(), lanes as usize + 1);
    assert_eq!(out.lane_offsets[0], 0);
    assert_eq!(*out.lane_offsets.last().unwrap(), 200);
    let seqs = col(&r, "_openetl_seq").as_primitive::<Int64Type>();
    let is = col(&r, "i").as_primitive::<Int64Type>();
    for lane in 0..lanes as usize {
        let (a, b) = (out.lane_offsets[lane], out.lane_offsets[lane + 1]);
        assert!(a <= b);
        let mut prev = -1;
        for row in a..b {
            let seq = seqs.value(row) as usize;
            assert_eq!(is.value(row) as usize, seq, "cells follow their row");
            let (_, _, key, payload) = rows[seq];
            assert_eq!(
                route::lane_of(key.as_bytes(), payload.as_bytes(), lanes) as usize,
                lane
            );
            assert!(seqs.value(row) > prev, "stable within a lane");
            prev = seqs.value(row);
        }
    }
    let ids = utf8(&r, "_openetl_id");
    for (row, id) in ids.iter().enumerate() {
        let seq = seqs.value(row) as usize;
        let (_, s, key, payload) = rows[seq];
        let want = meta::record_id_hex(b"s", key.as_bytes(), payload.as_bytes(), s);
        assert_eq!(id.as_deref(), Some(want.as_str()));
    }
}

#[test]
fn state_round_trip() {
    let mut e = engine(1);
    push(
        &mut e,
        "a",
        &[r#"{"x":1,"y":"s","z":null}"#, r#"{"x":1.5,"w":true}"#],
    );
    push(&mut e, "b", &[r#"{"q":[1]}"#]);
    let state = e.state();
    let v: serde_json::Value = serde_json::from_slice(&state).unwrap();
    let cfg = format!(r#"{{"lanes":1,"max_document_bytes":100,"state":{v}}}"#);
    let mut e2 = Engine::from_config_json(cfg.as_bytes()).unwrap();
    assert_eq!(e2.state(), state);
    assert_eq!(e2.columns("a"), e.columns("a"));
    // A state passed as a JSON string works too.
    let cfg = serde_json::json!({"state": String::from_utf8(state.clone()).unwrap()}).to_string();
    assert_eq!(
        Engine::from_config_json(cfg.as_bytes()).unwrap().state(),
        state
    );
    // The schema is reproduced for a batch that lacks every column.
    let r = push(&mut e2, "a", &[r#"{}"#]).record.unwrap();
    assert_eq!(names(&r)[..4], ["x", "y", "z", "w"]);
    let r1 = push(&mut e, "a", &[r#"{}"#]).record.unwrap();
    assert_eq!(r.schema(), r1.schema());

    for bad in [
        r#"{"state":"{"}"#,
        r#"{"state":{"version":9,"streams":[]}}"#,
        r#"{"state":[1]}"#,
    ] {
        let err = Engine::from_config_json(bad.as_bytes()).err().unwrap();
        assert_eq!(err.status, openetl_engine::Status::InvalidState, "{bad}");
    }
    for bad in [
        r#"{"lanes":0}"#,
        r#"{"lanes":-1}"#,
        r#"{"bogus":1}"#,
        "[",
        r#"{"max_document_bytes":0}"#,
    ] {
        let err = Engine::from_config_json(bad.as_bytes()).err().unwrap();
        assert_eq!(err.status, openetl_engine::Status::InvalidInput, "{bad}");
    }
}

/// A small deterministic generator (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_value(rng: &mut Rng, depth: u32) -> String {
    match rng.below(if depth > 3 { 7 } else { 9 }) {
        0 => "null".into(),
        1 => "true".into(),
        2 => format!("{}", rng.next() as i64 >> rng.below(64)),
        3 => format!(
            "{}.{}e{}",
            rng.below(1000),
            rng.below(100),
            rng.below(20) as i64 - 10
        ),
        4 => format!("\"s{}\\n\\u00e9\"", rng.below(100)),
        5 => "\"plain\"".into(),
        6 => "123456789012345678901234567890".into(),
        7 => format!(
            "[{},{}]",
            random_value(rng, depth + 1),
            random_value(rng, depth + 1)
        ),
        _ => format!("{{\"k\":{}}}", random_value(rng, depth + 1)),
    }
}

fn random_doc(rng: &mut Rng) -> String {
    let fields = rng.below(6);
    let mut doc = String::from("{");
    for f in 0..fields {
        if f > 0 {
            doc.push(',');
        }
        doc.push_str(&format!("\"f{}\":{}", rng.below(8), random_value(rng, 0)));
    }
    doc.push('}');
    // Corrupt some documents.
    match rng.below(10) {
        0 if !doc.is_empty() => {
            let cut = rng.below(doc.len() as u64) as usize;
            doc.truncate(cut);
        }
        1 => doc.insert(rng.below(doc.len() as u64) as usize, '\u{1}'),
        _ => {}
    }
    doc
}

#[test]
fn randomized_every_row_accounted_for() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
        let lanes = 1 + rng.below(4) as u32;
        let mut e = engine(lanes);
        for _batch in 0..5 {
            let n = rng.below(60) as usize;
            let docs: Vec<String> = (0..n).map(|_| random_doc(&mut rng)).collect();
            let keys: Vec<String> = (0..n)
                .map(|i| {
                    if rng.below(2) == 0 {
                        String::new()
                    } else {
                        format!("k{i}")
                    }
                })
                .collect();
            let rows: Vec<(u8, i64, &str, &str)> = (0..n)
                .map(|i| {
                    (
                        1 + rng.below(4) as u8,
                        i as i64,
                        keys[i].as_str(),
                        docs[i].as_str(),
                    )
                })
                .collect();
            let out = push_rows(&mut e, "s", &rows);
            let mut seen = vec![0u8; n];
            for q in &out.quarantined {
                seen[q.row as usize] += 1;
            }
            if let Some(r) = &out.record {
                let seqs = col(r, "_openetl_seq").as_primitive::<Int64Type>();
                for s in seqs.values() {
                    seen[*s as usize] += 1;
                }
                // Check the output survives Arrow's full validation.
                StructArray::from(r.clone())
                    .into_data()
                    .validate_full()
                    .unwrap();
            }
            assert!(seen.iter().all(|&c| c == 1), "seed {seed}: {seen:?}");
            for (i, doc) in docs.iter().enumerate() {
                let valid =
                    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(doc).is_ok();
                let op_ok = (1..=3).contains(&rows[i].0);
                let quarantined = out.quarantined.iter().any(|q| q.row as usize == i);
                if valid && op_ok && !quarantined {
                    continue;
                }
                if valid && op_ok {
                    // Valid JSON is only refused for duplicate fields.
                    let q = out
                        .quarantined
                        .iter()
                        .find(|q| q.row as usize == i)
                        .unwrap();
                    assert!(
                        q.detail.contains("duplicate"),
                        "seed {seed} doc {doc:?}: {}",
                        q.detail
                    );
                } else if !(valid || doc.is_empty() && rows[i].0 == 3) {
                    // (A delete without a document is taken.)
                    assert!(quarantined, "seed {seed}: invalid {doc:?} was taken");
                }
            }
        }
    }
}

mod c_surface {
    use super::*;
    use arrow_data::ffi::FFI_ArrowArray;
    use arrow_schema::ffi::FFI_ArrowSchema;
    use openetl_engine::*;
    use std::ffi::{CStr, c_char, c_void};
    use std::ptr;

    fn take_err(err: *mut c_char) -> String {
        assert!(!err.is_null());
        // SAFETY: err came from the library and is freed once here.
        let s = unsafe { CStr::from_ptr(err) }
            .to_string_lossy()
            .into_owned();
        unsafe { openetl_string_free(err) };
        s
    }

    #[cfg(feature = "debug-panic")]
    #[test]
    fn debug_panic_is_caught() {
        let mut err = ptr::null_mut();
        let st = unsafe { openetl_engine_debug_panic(&mut err) };
        assert_eq!(st, Status::Panic as i32);
        let msg = take_err(err);
        assert!(msg.contains("debug panic requested"), "{msg}");
        assert!(msg.contains(" at src/lib.rs:"), "location missing: {msg}");
        assert_eq!(openetl_engine_abi_v1(), 1);
    }

    #[test]
    fn push_through_c_abi() {
        let cfg = br#"{"lanes":2,"max_document_bytes":64,"state":null}"#;
        let mut eng: *mut c_void = ptr::null_mut();
        let mut err = ptr::null_mut();
        assert_eq!(
            unsafe { openetl_engine_new(cfg.as_ptr(), cfg.len(), &mut eng, &mut err) },
            0
        );

        let batch = input::batch(&[
            (1u8, 1i64, "a", r#"{"x":1}"#),
            (1, 2, "", "bad"),
            (1, 3, "b", r#"{"x":2}"#),
        ]);
        let mut in_array = FFI_ArrowArray::new(&batch.into_data());
        let mut out_array = FFI_ArrowArray::empty();
        let mut out_schema = FFI_ArrowSchema::empty();
        let mut q_array = FFI_ArrowArray::empty();
        let mut q_schema = FFI_ArrowSchema::empty();
        let mut offs = [0i64; 3];
        let (mut n_out, mut n_q) = (0i64, 0i64);
        let stream = b"s";
        let st = unsafe {
            openetl_engine_push(
                eng,
                stream.as_ptr(),
                stream.len(),
                &mut in_array,
                ptr::null_mut(),
                5,
                &mut out_array,
                &mut out_schema,
                &mut q_array,
                &mut q_schema,
                offs.as_mut_ptr(),
                offs.len(),
                &mut n_out,
                &mut n_q,
                &mut err,
            )
        };
        assert_eq!(st, 0);
        assert!(in_array.is_released(), "the engine took the input");
        assert_eq!((n_out, n_q), (2, 1));
        assert_eq!(offs[2], 2);
        let data = unsafe { arrow_array::ffi::from_ffi(out_array, &out_schema) }.unwrap();
        let rec = RecordBatch::from(StructArray::from(data));
        assert_eq!(rec.num_rows(), 2);
        let q = unsafe { arrow_array::ffi::from_ffi(q_array, &q_schema) }.unwrap();
        let q = RecordBatch::from(StructArray::from(q));
        assert_eq!(
            q.column(0)
                .as_primitive::<arrow_array::types::UInt32Type>()
                .value(0),
            1
        );
        assert_eq!(q.column(1).as_string::<i32>().value(0), "parse_error");

        // Wrong lane_offsets length: status 1, input still taken.
        let batch = input::batch(&[(1u8, 1i64, "a", r#"{"x":1}"#)]);
        let mut in_array = FFI_ArrowArray::new(&batch.into_data());
        let mut out_array = FFI_ArrowArray::empty();
        let mut out_schema = FFI_ArrowSchema::empty();
        let mut q_array = FFI_ArrowArray::empty();
        let mut q_schema = FFI_ArrowSchema::empty();
        let st = unsafe {
            openetl_engine_push(
                eng,
                stream.as_ptr(),
                stream.len(),
                &mut in_array,
                ptr::null_mut(),
                5,
                &mut out_array,
                &mut out_schema,
                &mut q_array,
                &mut q_schema,
                offs.as_mut_ptr(),
                2,
                &mut n_out,
                &mut n_q,
                &mut err,
            )
        };
        assert_eq!(st, Status::InvalidInput as i32);
        assert!(in_array.is_released());
        assert!(take_err(err).contains("lane_offsets"));

        let (mut p, mut n) = (ptr::null_mut(), 0usize);
        let mut err = ptr::null_mut();
        assert_eq!(
            unsafe { openetl_engine_state(eng, &mut p, &mut n, &mut err) },
            0
        );
        let state = unsafe { std::slice::from_raw_parts(p, n) }.to_vec();
        unsafe { openetl_bytes_free(p, n) };
        assert_eq!(
            String::from_utf8(state).unwrap(),
            r#"{"streams":[{"columns":[{"name":"x","type":"int64"}],"name":"s","names":{"columns":[["x","x"]],"table":null}}],"version":1}"#
        );
        unsafe { openetl_engine_free(eng) };

        // Corrupt state: status 2.
        let cfg = br#"{"state":{"version":1,"streams":7}}"#;
        let mut eng: *mut c_void = ptr::null_mut();
        assert_eq!(
            unsafe { openetl_engine_new(cfg.as_ptr(), cfg.len(), &mut eng, &mut err) },
            2
        );
        assert!(take_err(err).contains("streams"));
        assert!(eng.is_null());
    }
}

#[test]
fn nested_values_become_structs_and_lists() {
    use arrow_array::StructArray;
    let mut e = engine(1);
    let out = push(
        &mut e,
        "s",
        &[
            r#"{"tags":["x","y"],"addr":{"city":"Paris","zip":75001},"m":{"a":1}}"#,
            r#"{"tags":[],"addr":{"city":"Oslo","zip":1.5,"geo":[1,2]},"m":[1]}"#,
            r#"{"tags":null}"#,
        ],
    );
    let r = out.record.unwrap();
    let ty = |n: &str| r.schema().field_with_name(n).unwrap().data_type().clone();
    assert!(matches!(ty("tags"), DataType::List(f) if f.data_type() == &DataType::Utf8));
    // Object meeting array: the column is JSON text from then on.
    assert_eq!(ty("m"), DataType::Utf8);
    assert_eq!(
        utf8(&r, "m"),
        [Some(r#"{"a":1}"#.into()), Some("[1]".into()), None]
    );
    let addr = col(&r, "addr")
        .as_any()
        .downcast_ref::<StructArray>()
        .unwrap();
    let names: Vec<&str> = addr.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["city", "geo", "zip"]);
    assert_eq!(
        addr.column_by_name("zip").unwrap().data_type(),
        &DataType::Float64
    );
    assert!(addr.is_null(2));
    let tags = col(&r, "tags").as_list::<i32>();
    assert_eq!(tags.value_offsets(), &[0, 2, 2, 2]);
    assert!(tags.is_null(2) && !tags.is_null(1));
    // The shape is in the state and survives a restart.
    let st = String::from_utf8(e.state()).unwrap();
    let mut e2 = Engine::from_config_json(format!(r#"{{"state":{st}}}"#).as_bytes()).unwrap();
    assert_eq!(e2.column_types("s"), e.column_types("s"));
    let doc = r#"{"addr":{"city":"Rome","zip":1},"tags":["z"]}"#;
    let a = push(&mut e, "s", &[doc]).record.unwrap();
    let b = push(&mut e2, "s", &[doc]).record.unwrap();
    assert_eq!(a, b);
    // A new struct field is reported as a widening.
    push(&mut e, "s", &[r#"{"addr":{"extra":true}}"#]);
    assert_eq!(e.changes().len(), 1);
    assert_eq!(
        (e.changes()[0].kind, e.changes()[0].column.as_str()),
        ("widened", "addr")
    );
}

#[test]
fn rfc3339_timestamps_on_request() {
    let mut e =
        Engine::from_config_json(br#"{"streams":[{"name":"t","timestamps":true}]}"#).unwrap();
    let out = push(
        &mut e,
        "t",
        &[
            r#"{"at":"1970-01-01T00:00:01Z","s":"1970-01-01T00:00:01Z"}"#,
            r#"{"at":"1970-01-01T02:00:00+02:00","s":"later"}"#,
        ],
    );
    let r = out.record.unwrap();
    let at = col(&r, "at").as_primitive::<TimestampMicrosecondType>();
    assert_eq!(at.values(), &[1_000_000, 0]);
    assert_eq!(
        utf8(&r, "s"),
        [Some("1970-01-01T00:00:01Z".into()), Some("later".into())]
    );
    // Without the option they are strings.
    let out = push(&mut engine(1), "u", &[r#"{"at":"1970-01-01T00:00:01Z"}"#]);
    assert_eq!(out.record.unwrap().column(0).data_type(), &DataType::Utf8);
}
