//! The tape against the path it replaces: serde_json `Value`s typed by
//! `JType::of` and built by `nested::build` must give the same types and
//! the same arrays.

use super::*;
use crate::nested;
use proptest::prelude::*;

/// Pushes each value (padded, at an offset, to check absolute spans) and
/// compares inference, `fits` and the built array with the Value path.
fn check(values: &[&str]) {
    let mut src = Vec::new();
    let mut spans = Vec::new();
    for v in values {
        src.extend_from_slice(b" x ");
        let a = src.len();
        src.extend_from_slice(v.as_bytes());
        spans.push((a, src.len()));
    }
    let mut tape = Tape::default();
    let parsed: Vec<Value> = values
        .iter()
        .map(|v| serde_json::from_str(v).unwrap())
        .collect();
    let mut roots = Vec::new();
    let mut tree = JType::Null;
    for ((a, b), v) in spans.iter().zip(&parsed) {
        let r = tape.push(&src, *a, *b).unwrap();
        let want = JType::of(v, 1);
        assert_eq!(tape.infer(&src, r, 1), want, "{v}");
        let joined = tree.join(&want);
        if tape.fits(&src, &tree, r, 1) {
            assert_eq!(joined, tree, "fits but widens: {v}");
        }
        tree = joined;
        roots.push(r);
    }
    for (r, v) in roots.iter().zip(&parsed) {
        assert!(
            tape.fits(&src, &tree, *r, 1) || has_dup_keys(&tape, &src, *r),
            "{v} vs {tree:?}"
        );
    }
    // Rows with no value, too.
    roots.push(NONE);
    let mut refs: Vec<Option<&Value>> = parsed.iter().map(Some).collect();
    refs.push(None);
    let want = nested::build(&tree, &refs).unwrap();
    let got = build(&tree, &mut tape, &src, &roots).unwrap();
    assert_eq!(got.to_data(), want.to_data(), "{values:?} as {tree:?}");
    // Every value also as JSON text (a utf8 column).
    let want = nested::build(&JType::Utf8, &refs).unwrap();
    let got = build(&JType::Utf8, &mut tape, &src, &roots).unwrap();
    assert_eq!(got.to_data(), want.to_data(), "{values:?} as text");
}

/// serde_json drops the earlier of duplicate keys; `fits` may then say no.
fn has_dup_keys(tape: &Tape, src: &[u8], i: u32) -> bool {
    let n = tape.nodes[i as usize];
    match n.tag {
        Tag::Arr => tape.elements(i).any(|e| has_dup_keys(tape, src, e)),
        Tag::Obj => {
            let mut keys: Vec<&[u8]> = tape
                .members(i)
                .map(|(k, _)| tape.bytes(src, &tape.nodes[k as usize]))
                .collect();
            keys.sort();
            keys.windows(2).any(|w| w[0] == w[1])
                || tape.members(i).any(|(_, v)| has_dup_keys(tape, src, v))
        }
        _ => false,
    }
}

#[test]
fn agrees_with_serde_json() {
    check(&[
        r#"{"x":1,"y":[1,2]}"#,
        r#"{"x":1.5,"z":"s","y":[]}"#,
        "null",
    ]);
    check(&["[1,\"a\"]", "[1,{\"a\":1}]", "[18446744073709551615]"]);
    check(&["{}", "[]"]);
    check(&[r#"{"A":1,"a":2}"#, r#"[{"b":{"X":1}},{"b":{"x":1}}]"#]);
    check(&[r#"{"o":{"K":1}}"#, r#"{"o":{"k":2,"K":3}}"#]);
    check(&[r#"{"b":1,"a":2,"b":"x"}"#, r#"{"a":[{"k":"v","k":3}]}"#]);
    check(&[r#"[-0, 1.5, 1e+2, 1e+400, 12345678901234567890123, 0.1000000000000000055511]"#]);
    check(&[r#"[-0, 3]"#, r#"[2.5]"#]);
    check(&[r#"{"s":"a\"b\\c\n\u0001\u001f\u007f\/é😀","t":"\ud83d\ude00"}"#]);
    check(&[
        r#"{"\u0062":1,"b":2}"#,
        r#"{"a\\":{"q":[[true,false,null]]}}"#,
    ]);
    check(&[r#"[{"a":1},[1],"x",2,true,null,{"b":{"c":[1,{"d":"e"}]}}]"#]);
    check(&[
        r#"{"$serde_json::private::Number":"12.5"}"#,
        r#"{"a":{"$serde_json::private::RawValue":"[1,2]"}}"#,
    ]);
    check(&[
        r#"{"a":{"$serde_json::private::Number":"1"}}"#,
        r#"{"a":{"x":1}}"#,
    ]);
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(12), "]".repeat(12));
    check(&[&deep, r#"{"a":[[1]]}"#]);
    let deep = format!(
        "{}{}",
        "{\"k\":".repeat(10),
        "}".repeat(10).replacen('}', "1}", 1)
    );
    check(&[&deep]);
}

/// Numbers keep the text the document has (serde_json's `Value` writes
/// `1e400` as `1e+400`), in JSON text as in utf8 positions.
#[test]
fn numbers_keep_their_text() {
    let src = br#"[1E400,1e400,"x",2.50,-0,1E5,{"n":1e-400}]"#;
    let mut tape = Tape::default();
    let r = tape.push(src, 0, src.len()).unwrap();
    let t = tape.infer(src, r, 1);
    assert_eq!(t, JType::List(Box::new(JType::Utf8)));
    let a = build(&t, &mut tape, src, &[r]).unwrap();
    let l = a.as_any().downcast_ref::<arrow_array::ListArray>().unwrap();
    let v = l.values();
    let s = v
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .unwrap();
    let got: Vec<&str> = s.iter().map(Option::unwrap).collect();
    assert_eq!(
        got,
        [
            "1E400",
            "1e400",
            "x",
            "2.50",
            "-0",
            "1E5",
            r#"{"n":1e-400}"#
        ]
    );
}

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        (0u8..20).prop_map(|i| i.to_string()),
        Just("-0".to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            // serde_json writes exponents as e+N / e-N: the text the
            // tape keeps as written then agrees with it.
            .prop_map(|f| {
                let s = format!("{f:e}");
                if s.contains("e-") {
                    s
                } else {
                    s.replace('e', "e+")
                }
            }),
        any::<f64>().prop_map(|f| format!("{f}")),
        "[1-9][0-9]{15,40}",
        "-?[0-9]\\.[0-9]{10,40}",
        "[a-c\\\\\"é\u{1}\n/ ]{0,6}".prop_map(|s| serde_json::to_string(&s).unwrap()),
        Just("\"\\u0061\\/\"".to_string()),
    ];
    leaf.prop_recursive(10, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(" , "))),
            prop::collection::vec(("[a-c]|\\\\u0061", inner), 0..4).prop_map(|v| {
                let f: Vec<String> = v.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{ {} }}", f.join(","))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn agrees_with_serde_json_on_random_values(values in prop::collection::vec(json_value(), 1..6)) {
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        check(&refs);
    }
}
