//! Column and row policies through the public Rust API.

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use openetl_engine::input::{self, RawRows};
use openetl_engine::policy::HmacKey;
use openetl_engine::rows::encode;
use openetl_engine::{Engine, PushOutput};

fn engine(cfg: &str) -> Engine {
    Engine::from_config_json(cfg.as_bytes()).unwrap()
}

/// Pushes (op, key, payload) rows; checks every row is accounted for.
fn push(e: &mut Engine, stream: &str, rows: &[(u8, &[u8], &[u8])]) -> PushOutput {
    let rows: Vec<(u8, i64, &[u8], &[u8])> = rows
        .iter()
        .enumerate()
        .map(|(i, (op, k, p))| (*op, i as i64, *k, *p))
        .collect();
    let batch = input::batch(&rows);
    let raw = RawRows::new(&batch).unwrap();
    let out = e.push(stream, &raw, 0).unwrap();
    let taken = out.record.as_ref().map_or(0, |r| r.num_rows());
    assert_eq!(taken + out.quarantined.len() + out.filtered, rows.len());
    out
}

fn strs(r: &RecordBatch, col: &str) -> Vec<Option<String>> {
    let a = r
        .column_by_name(col)
        .unwrap_or_else(|| panic!("no column {col}"));
    let s = a.as_string::<i32>();
    (0..s.len())
        .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
        .collect()
}

fn names(r: &RecordBatch) -> Vec<String> {
    r.schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| !n.starts_with("_openetl_"))
        .collect()
}

const KEY_HEX: &str = "6b6579"; // "key"

fn hmac_hex(v: &str) -> String {
    let mut out = Vec::new();
    HmacKey::new(b"key").hex(v.as_bytes(), &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn hmac_matches_rfc_4231() {
    // RFC 4231 test case 2.
    let mut out = Vec::new();
    HmacKey::new(b"Jefe").hex(b"what do ya want for nothing?", &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // Test case 6: a key longer than the block.
    let mut out = Vec::new();
    HmacKey::new(&[0xaa; 131]).hex(
        b"Test Using Larger Than Block-Size Key - Hash Key First",
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    // Test case 7: data of several blocks.
    let mut out = Vec::new();
    HmacKey::new(&[0xaa; 131]).hex(
        b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.",
        &mut out,
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"
    );
}

fn json_cfg(rules: &str, filter: &str) -> String {
    format!(
        r#"{{"lanes":1,"streams":[{{"name":"t","format":"json","policies":{{"rules":[{rules}],"filter":{filter}}}}}]}}"#
    )
}

#[test]
fn column_rules_on_json() {
    let doc = r#"{"name":"Zoë Ångström","card":"4111111111111111","ssn":"123-45-6789","n":12345}"#
        .as_bytes();
    // (rules, column, expected value or None for "column absent")
    let (hash_ssn, hash_n) = (
        format!(r#"{{"kind":"hash","column":"ssn","key":"{KEY_HEX}"}}"#),
        format!(r#"{{"kind":"hash","column":"n","key":"{KEY_HEX}"}}"#),
    );
    let cases: Vec<(&str, &str, Option<String>)> = vec![
        (r#"{"kind":"exclude","column":"ssn"}"#, "ssn", None),
        (r#"{"kind":"include","columns":["name","n"]}"#, "card", None),
        (
            r#"{"kind":"mask","column":"card","n":4}"#,
            "card",
            Some("************1111".into()),
        ),
        (
            r#"{"kind":"mask","column":"name","n":3}"#,
            "name",
            Some("*********röm".into()),
        ),
        (
            r#"{"kind":"truncate_chars","column":"name","n":3}"#,
            "name",
            Some("Zoë".into()),
        ),
        (
            r#"{"kind":"truncate_bytes","column":"name","n":3}"#,
            "name",
            Some("Zo".into()),
        ),
        (&hash_ssn, "ssn", Some(hmac_hex("123-45-6789"))),
        // A number is hashed as its JSON text: the column is utf8.
        (&hash_n, "n", Some(hmac_hex("12345"))),
        (
            r#"{"kind":"rename","column":"ssn","to":"tax_id"}"#,
            "tax_id",
            Some("123-45-6789".into()),
        ),
    ];
    for (rules, col, want) in cases {
        let mut e = engine(&json_cfg(rules, "null"));
        let out = push(&mut e, "t", &[(1, b"", doc)]);
        let r = out.record.unwrap();
        match &want {
            None => assert!(
                !names(&r).contains(&col.to_string()),
                "{rules}: {:?}",
                names(&r)
            ),
            Some(v) => assert_eq!(strs(&r, col), vec![Some(v.clone())], "{rules}"),
        }
        if rules.contains("rename") {
            assert!(!names(&r).contains(&"ssn".to_string()));
        }
    }
    // Set null keeps the column, all null.
    let mut e = engine(&json_cfg(r#"{"kind":"null","column":"n"}"#, "null"));
    let r = push(&mut e, "t", &[(1, b"", doc)]).record.unwrap();
    assert_eq!(r.column_by_name("n").unwrap().null_count(), 1);
}

#[test]
fn state_never_holds_the_key() {
    let mut e = engine(&json_cfg(
        r#"{"kind":"hash","column":"a","key":"00112233445566778899"}"#,
        "null",
    ));
    push(&mut e, "t", &[(1, b"", br#"{"a":"x"}"#)]);
    let st = String::from_utf8(e.state()).unwrap();
    assert!(!st.contains("00112233445566778899"), "{st}");
    assert!(!st.contains("hash"), "{st}");
    let dbg = format!("{:?}", e.config());
    assert!(!dbg.contains("00112233"), "{dbg}");
}

/// Rows of a filter test: a JSON document per row, `c` a number.
fn filter_rows(filter: &str, docs: &[&str]) -> (Vec<usize>, usize) {
    let mut e = engine(&json_cfg("", filter));
    let rows: Vec<(u8, &[u8], &[u8])> = docs.iter().map(|d| (1, &b""[..], d.as_bytes())).collect();
    let out = push(&mut e, "t", &rows);
    let kept = out.record.as_ref().map_or(vec![], |r| {
        let s = r.column_by_name("_openetl_seq").unwrap();
        let s = s.as_primitive::<arrow_array::types::Int64Type>();
        s.values().iter().map(|&v| v as usize).collect()
    });
    (kept, out.filtered)
}

#[test]
fn filters() {
    let docs = [
        r#"{"c":1,"s":"a","b":true}"#,
        r#"{"c":2,"s":"b","b":false}"#,
        r#"{"c":3,"s":null}"#,
        r#"{"s":"d"}"#,
    ];
    let cases: &[(&str, &[usize])] = &[
        (r#"{"op":"eq","column":"c","value":{"int":2}}"#, &[1]),
        (r#"{"op":"ne","column":"c","value":{"int":2}}"#, &[0, 2]),
        (r#"{"op":"lt","column":"c","value":{"int":2}}"#, &[0]),
        (r#"{"op":"le","column":"c","value":{"float":2.0}}"#, &[0, 1]),
        (r#"{"op":"gt","column":"c","value":{"int":1}}"#, &[1, 2]),
        (r#"{"op":"ge","column":"s","value":{"str":"b"}}"#, &[1, 3]),
        (r#"{"op":"is_null","column":"c"}"#, &[3]),
        (r#"{"op":"not_null","column":"s"}"#, &[0, 1, 3]),
        (r#"{"op":"is_null","column":"nope"}"#, &[0, 1, 2, 3]),
        (r#"{"op":"eq","column":"b","value":{"bool":true}}"#, &[0]),
        (
            r#"{"op":"in","column":"s","values":[{"str":"a"},{"str":"d"}]}"#,
            &[0, 3],
        ),
        // A literal of another type is unknown, never true.
        (r#"{"op":"eq","column":"s","value":{"int":1}}"#, &[]),
        (
            r#"{"op":"and","args":[{"op":"gt","column":"c","value":{"int":1}},{"op":"not_null","column":"s"}]}"#,
            &[1],
        ),
        (
            r#"{"op":"or","args":[{"op":"eq","column":"c","value":{"int":1}},{"op":"eq","column":"s","value":{"str":"d"}}]}"#,
            &[0, 3],
        ),
        // NOT of unknown is unknown: the row without c fails both ways.
        (
            r#"{"op":"not","args":[{"op":"eq","column":"c","value":{"int":1}}]}"#,
            &[1, 2],
        ),
    ];
    for (f, want) in cases {
        let (kept, filtered) = filter_rows(f, &docs);
        assert_eq!(&kept, want, "{f}");
        assert_eq!(filtered, docs.len() - want.len(), "{f}");
    }
}

#[test]
fn filter_keeps_lanes_and_deletes() {
    let cfg = r#"{"lanes":4,"streams":[{"name":"t","format":"json","keyed":true,"policies":{"filter":{"op":"gt","column":"c","value":{"int":5}}}}]}"#;
    let mut e = engine(cfg);
    let docs: Vec<(Vec<u8>, Vec<u8>)> = (0..40)
        .map(|i| {
            (
                format!("k{i}").into_bytes(),
                format!(r#"{{"c":{}}}"#, i % 10).into_bytes(),
            )
        })
        .collect();
    let mut rows: Vec<(u8, &[u8], &[u8])> = docs.iter().map(|(k, d)| (1, &k[..], &d[..])).collect();
    rows.push((3, b"k99", b"")); // a delete passes
    let out = push(&mut e, "t", &rows);
    let r = out.record.unwrap();
    assert_eq!(r.num_rows(), 16 + 1);
    assert_eq!(out.filtered, 24);
    assert_eq!(out.lane_offsets.len(), 5);
    assert_eq!(*out.lane_offsets.last().unwrap(), r.num_rows());
    assert!(out.lane_offsets.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn merge_filter_turns_failures_into_deletes() {
    let cfg = r#"{"lanes":1,"streams":[{"name":"t","format":"row","types":"postgres","keyed":true,
      "columns":[{"name":"id","type":"int8","key":true},{"name":"region","type":"text"},{"name":"email","type":"text"}],
      "policies":{"merge":true,"key":["id"],"filter":{"op":"eq","column":"region","value":{"str":"eu"}}}}]}"#;
    let mut e = engine(cfg);
    let row = |id: &str, region: &str| {
        encode(&[
            Some(id.as_bytes()),
            Some(region.as_bytes()),
            Some(&b"x@y"[..]),
        ])
    };
    let (a, b, c) = (row("1", "eu"), row("2", "us"), row("3", "us"));
    let out = push(&mut e, "t", &[(1, b"1", &a), (2, b"2", &b), (3, b"3", &c)]);
    assert_eq!(out.filtered, 0);
    let r = out.record.unwrap();
    assert_eq!(
        strs(&r, "_openetl_op"),
        ["insert", "delete", "delete"].map(|s| Some(s.to_string()))
    );
    // The failing row's other columns are null, its key kept; the
    // source's delete passes as it is.
    assert_eq!(
        strs(&r, "email"),
        [Some("x@y".into()), None, Some("x@y".into())]
    );
    assert_eq!(r.column_by_name("id").unwrap().null_count(), 0);
}

#[test]
fn declared_checks() {
    let cfg = |pol: &str| {
        format!(
            r#"{{"lanes":1,"streams":[{{"name":"t","format":"row","types":"postgres","keyed":true,
          "columns":[{{"name":"id","type":"int8","key":true}},{{"name":"s","type":"text"}},{{"name":"f","type":"float8"}}],
          "policies":{pol}}}]}}"#
        )
    };
    let bad = [
        (
            r#"{"rules":[{"kind":"exclude","column":"nope"}]}"#,
            "no column",
        ),
        (
            r#"{"rules":[{"kind":"mask","column":"f","n":2}]}"#,
            "can't take",
        ),
        (
            &format!(r#"{{"rules":[{{"kind":"hash","column":"f","key":"{KEY_HEX}"}}]}}"#) as &str,
            "can't take",
        ),
        (
            r#"{"rules":[{"kind":"rename","column":"s","to":"f"}]}"#,
            "already",
        ),
        (
            r#"{"merge":true,"key":["id"],"rules":[{"kind":"exclude","column":"id"}]}"#,
            "key column",
        ),
        (
            r#"{"merge":true,"key":["id"],"rules":[{"kind":"mask","column":"id","n":2}]}"#,
            "key column",
        ),
        (
            r#"{"merge":true,"key":["id"],"rules":[{"kind":"include","columns":["s"]}]}"#,
            "not included",
        ),
        (
            r#"{"filter":{"op":"eq","column":"s","value":{"int":1}}}"#,
            "can't be compared",
        ),
        (
            r#"{"filter":{"op":"eq","column":"zz","value":{"int":1}}}"#,
            "no column",
        ),
        (
            r#"{"rules":[{"kind":"null","column":"s"},{"kind":"mask","column":"s","n":1}]}"#,
            "two rules",
        ),
        (
            r#"{"rules":[{"kind":"hash","column":"s","key":""}]}"#,
            "no key",
        ),
    ];
    for (pol, want) in bad {
        let err = Engine::from_config_json(cfg(pol).as_bytes())
            .err()
            .unwrap_or_else(|| panic!("{pol}: no error"));
        assert!(err.to_string().contains(want), "{pol}: {err}");
        assert!(
            !err.to_string().contains(KEY_HEX) || !pol.contains("hash"),
            "{err}"
        );
    }
    // Hash of an int8 key is its decimal text; rename carries to naming.
    let mut e = engine(&cfg(&format!(
        r#"{{"merge":true,"key":["id"],"rules":[{{"kind":"hash","column":"id","key":"{KEY_HEX}"}},{{"kind":"rename","column":"s","to":"t"}}]}}"#
    )));
    let row = encode(&[Some(&b"42"[..]), Some(&b"v"[..]), None]);
    let r = push(&mut e, "t", &[(1, b"42", &row)]).record.unwrap();
    assert_eq!(strs(&r, "id"), [Some(hmac_hex("42"))]);
    assert_eq!(names(&r), ["id", "t", "f"]);
    let st = String::from_utf8(e.state()).unwrap();
    assert!(st.contains(r#"["t","t"]"#), "{st}");
}

#[test]
fn filter_on_an_excluded_column() {
    for cfg in [
        r#"{"lanes":1,"streams":[{"name":"t","format":"json","policies":{"rules":[{"kind":"exclude","column":"c"},{"kind":"include","columns":["c","s"]}],"filter":{"op":"eq","column":"c","value":{"int":1}}}}]}"#,
        r#"{"lanes":1,"streams":[{"name":"t","format":"row","types":"postgres","columns":[{"name":"c","type":"int8"},{"name":"s","type":"text"},{"name":"x","type":"text"}],"policies":{"rules":[{"kind":"exclude","column":"c"},{"kind":"include","columns":["c","s"]}],"filter":{"op":"eq","column":"c","value":{"int":1}}}}]}"#,
    ] {
        let mut e = engine(cfg);
        let declared = cfg.contains("\"row\"");
        let docs: Vec<Vec<u8>> = (0..4)
            .map(|i| {
                if declared {
                    encode(&[
                        Some(format!("{}", i % 2).as_bytes()),
                        Some(&b"v"[..]),
                        Some(&b"w"[..]),
                    ])
                } else {
                    format!(r#"{{"c":{},"s":"v","x":"w"}}"#, i % 2).into_bytes()
                }
            })
            .collect();
        let rows: Vec<(u8, &[u8], &[u8])> = docs.iter().map(|d| (1, &b""[..], &d[..])).collect();
        let out = push(&mut e, "t", &rows);
        assert_eq!(out.filtered, 2, "{cfg}");
        let r = out.record.unwrap();
        assert_eq!(names(&r), ["s"], "{cfg}");
        assert_eq!(strs(&r, "s"), [Some("v".into()), Some("v".into())]);
    }
}

/// The filter runs before the columns are built (append streams whose
/// filter reads plain columns): the output must be what building every
/// row and then filtering gives, lane by lane, nested, missing and null
/// values, rules and deletes included.
#[test]
fn filter_first_matches_filtering_after() {
    let rules = format!(
        r#"{{"kind":"exclude","column":"x"}},{{"kind":"mask","column":"s","n":2}},{{"kind":"hash","column":"h","key":"{KEY_HEX}"}}"#
    );
    let docs: Vec<(u8, Vec<u8>, Vec<u8>)> = (0..97)
        .map(|i| {
            let op = if i % 13 == 0 { 3 } else { 1 };
            let on = match i % 4 {
                0 => "true",
                1 => "false",
                2 => "null",
                _ => "true",
            };
            let doc = if i % 11 == 5 {
                format!(r#"{{"s":"v{i}"}}"#)
            } else {
                format!(
                    r#"{{"on":{on},"s":"vé{i}","h":{i},"x":"secret{i}","n":{{"a":[{i},{{"b":"q{i}"}}]}},"f":{}}}"#,
                    i as f64 / 3.0
                )
            };
            (op, format!("k{i}").into_bytes(), doc.into_bytes())
        })
        .collect();
    let rows: Vec<(u8, &[u8], &[u8])> = docs.iter().map(|(o, k, d)| (*o, &k[..], &d[..])).collect();
    for lanes in [1, 3] {
        let cfg = |filter: &str| {
            format!(
                r#"{{"lanes":{lanes},"streams":[{{"name":"t","format":"json","keyed":true,"policies":{{"rules":[{rules}],"filter":{filter}}}}}]}}"#
            )
        };
        let all = push(&mut engine(&cfg("null")), "t", &rows);
        let got = push(
            &mut engine(&cfg(r#"{"op":"eq","column":"on","value":{"bool":true}}"#)),
            "t",
            &rows,
        );
        // By hand: every row, then those whose on is true, and deletes.
        let a = all.record.unwrap();
        let on = a.column_by_name("on").unwrap().as_boolean();
        let op = a.column_by_name("_openetl_op").unwrap().as_string::<i32>();
        let keep: arrow_array::BooleanArray = (0..a.num_rows())
            .map(|i| Some(op.value(i) == "delete" || (!on.is_null(i) && on.value(i))))
            .collect();
        let want = arrow_select::filter::filter_record_batch(&a, &keep).unwrap();
        let g = got.record.unwrap();
        assert_eq!(
            got.filtered,
            a.num_rows() - want.num_rows(),
            "lanes {lanes}"
        );
        assert_eq!(g.schema(), want.schema(), "lanes {lanes}");
        for (c, (x, y)) in g.columns().iter().zip(want.columns()).enumerate() {
            assert_eq!(x.to_data(), y.to_data(), "lanes {lanes}, column {c}");
        }
        // Lane boundaries: the kept rows of each lane.
        let mut offs = vec![0];
        for w in all.lane_offsets.windows(2) {
            let kept = (w[0]..w[1]).filter(|&i| keep.value(i)).count();
            offs.push(offs.last().unwrap() + kept);
        }
        assert_eq!(got.lane_offsets, offs, "lanes {lanes}");
    }
}

/// `In` (sorted sets) keeps what `Or` of `Eq`s keeps, negated or not,
/// over ints, floats, strings, nulls and literals of other types.
#[test]
fn in_is_or_of_eq() {
    let docs = [
        r#"{"i":1,"f":1.5,"s":"a"}"#,
        r#"{"i":2,"f":2.0,"s":"b"}"#,
        r#"{"i":null,"f":null,"s":null}"#,
        r#"{"i":-7,"f":-7.0,"s":"zz"}"#,
        r#"{}"#,
        r#"{"i":3,"f":3.25,"s":"é"}"#,
    ];
    let lits = [
        r#"{"int":2},{"int":-7}"#,
        r#"{"float":2.0},{"int":1}"#,
        r#"{"str":"b"},{"str":"é"},{"str":"a"}"#,
        r#"{"int":3},{"str":"x"}"#,
        r#"{"float":1.5},{"bool":true},{"int":-7}"#,
    ];
    for col in ["i", "f", "s"] {
        for l in lits {
            let v: serde_json::Value = serde_json::from_str(&format!("[{l}]")).unwrap();
            let eqs: Vec<String> = v
                .as_array()
                .unwrap()
                .iter()
                .map(|x| format!(r#"{{"op":"eq","column":"{col}","value":{x}}}"#))
                .collect();
            let in_ = format!(r#"{{"op":"in","column":"{col}","values":[{l}]}}"#);
            let or = format!(r#"{{"op":"or","args":[{}]}}"#, eqs.join(","));
            for (a, b) in [
                (in_.clone(), or.clone()),
                (
                    format!(r#"{{"op":"not","args":[{in_}]}}"#),
                    format!(r#"{{"op":"not","args":[{or}]}}"#),
                ),
            ] {
                assert_eq!(filter_rows(&a, &docs), filter_rows(&b, &docs), "{a}");
            }
        }
    }
}
