//! `_openetl_id` under policies: it must not let a reader confirm a guess
//! at a value a policy removed or altered.

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use openetl_engine::Engine;
use openetl_engine::input::{self, RawRows};
use openetl_engine::meta::record_id_hex;
use openetl_engine::policy::HmacKey;
use xxhash_rust::xxh3::xxh3_128;

const KEY_HEX: &str = "6b6579"; // "key"

/// Pushes (seq, key, payload) inserts; returns the output record.
fn push(cfg: &str, rows: &[(i64, &str, &str)]) -> RecordBatch {
    let mut e = Engine::from_config_json(cfg.as_bytes()).unwrap();
    let rows: Vec<(u8, i64, &[u8], &[u8])> = rows
        .iter()
        .map(|(s, k, p)| (1, *s, k.as_bytes(), p.as_bytes()))
        .collect();
    let batch = input::batch(&rows);
    let out = e.push("t", &RawRows::new(&batch).unwrap(), 0).unwrap();
    assert!(out.quarantined.is_empty(), "{:?}", out.quarantined);
    out.record.unwrap()
}

fn ids(r: &RecordBatch) -> Vec<String> {
    let a = r.column_by_name("_openetl_id").unwrap().as_string::<i32>();
    (0..a.len()).map(|i| a.value(i).to_string()).collect()
}

fn cfg(keyed: bool, merge: bool, rules: &str) -> String {
    format!(
        r#"{{"lanes":1,"streams":[{{"name":"t","format":"json","keyed":{keyed},"policies":{{"merge":{merge},"key":["id"],"rules":[{rules}]}}}}]}}"#
    )
}

#[test]
fn ids_do_not_confirm_hidden_values() {
    let hash_ssn = format!(r#"{{"kind":"hash","column":"ssn","key":"{KEY_HEX}"}}"#);
    let hash_id = format!(r#"{{"kind":"hash","column":"id","key":"{KEY_HEX}"}}"#);
    // (name, keyed, merge, rules, the column whose value is hidden)
    let cases: Vec<(&str, bool, bool, &str, &str)> = vec![
        (
            "keyless exclude",
            false,
            false,
            r#"{"kind":"exclude","column":"ssn"}"#,
            "ssn",
        ),
        (
            "keyless include",
            false,
            false,
            r#"{"kind":"include","columns":["id"]}"#,
            "ssn",
        ),
        (
            "keyless null",
            false,
            false,
            r#"{"kind":"null","column":"ssn"}"#,
            "ssn",
        ),
        (
            "keyless mask",
            false,
            false,
            r#"{"kind":"mask","column":"ssn","n":2}"#,
            "ssn",
        ),
        (
            "keyless truncate",
            false,
            false,
            r#"{"kind":"truncate_chars","column":"ssn","n":2}"#,
            "ssn",
        ),
        ("keyless hash", false, false, &hash_ssn, "ssn"),
        ("keyed hash of the key", true, true, &hash_id, "id"),
        (
            "keyed append, key masked",
            true,
            false,
            r#"{"kind":"mask","column":"id","n":2}"#,
            "id",
        ),
        (
            "keyed append, key excluded",
            true,
            false,
            r#"{"kind":"exclude","column":"id"}"#,
            "id",
        ),
    ];
    for (name, keyed, merge, rules, hidden) in cases {
        let doc = |id: &str, ssn: &str| format!(r#"{{"id":"{id}","ssn":"{ssn}","n":1}}"#);
        let (secret, guess) = ("123456789", "123456789");
        let payload = doc("id-7781", secret);
        let key = if keyed { "id-7781" } else { "" };
        let r = push(&cfg(keyed, merge, rules), &[(7, key, &payload)]);
        let id = &ids(&r)[0];
        // A reader who knows the ID function, the seq, the stream and the
        // other columns hashes guesses: the right one must not match.
        let guessed = doc("id-7781", guess);
        assert_ne!(
            id,
            &record_id_hex(b"t", key.as_bytes(), guessed.as_bytes(), 7),
            "{name}"
        );
        // Where the policy removes or masks the value, the ID does not
        // depend on it at all (the delivered row is the same).
        if !rules.contains("hash") {
            let other = if hidden == "id" {
                doc("id-1181", secret)
            } else {
                doc("id-7781", "123456389")
            };
            let okey = if keyed { "id-1181" } else { "" };
            let okey = if hidden == "id" { okey } else { key };
            let r2 = push(&cfg(keyed, merge, rules), &[(7, okey, &other)]);
            assert_eq!(&ids(&r2)[0], id, "{name}: the ID depends on a hidden value");
        }
        // Deterministic: the same record gets the same ID again (replays).
        let again = push(
            &cfg(keyed, merge, rules),
            &[(3, "x-0", "{}"), (7, key, &payload)],
        );
        assert_eq!(&ids(&again)[1], id, "{name}: not stable");
    }
}

#[test]
fn a_hashed_key_ids_by_its_hmac() {
    let rules = format!(r#"{{"kind":"hash","column":"id","key":"{KEY_HEX}"}}"#);
    let r = push(&cfg(true, true, &rules), &[(7, "42", r#"{"id":42}"#)]);
    let mut b = Vec::new();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(b"t");
    b.push(3);
    b.extend_from_slice(&HmacKey::new(b"key").digest(b"42"));
    b.extend_from_slice(&7i64.to_le_bytes());
    assert_eq!(ids(&r)[0], format!("{:032x}", xxh3_128(&b)));
}

#[test]
fn ids_without_a_changed_value_are_as_before() {
    // Keyed, rules on other columns only (also where the stream isn't
    // declared keyed but its records carry keys); no rule at all.
    for (keyed, key, rules) in [
        (true, "42", r#"{"kind":"exclude","column":"ssn"}"#),
        (false, "42", r#"{"kind":"exclude","column":"ssn"}"#),
        (
            true,
            "42",
            r#"{"kind":"rename","column":"id","to":"ident"}"#,
        ),
        (false, "", ""),
    ] {
        let payload = r#"{"id":42,"ssn":"123"}"#;
        let r = push(&cfg(keyed, false, rules), &[(7, key, payload)]);
        let want = record_id_hex(b"t", key.as_bytes(), payload.as_bytes(), 7);
        assert_eq!(ids(&r)[0], want, "{rules}");
    }
}

#[test]
fn keyless_ids_stay_distinct() {
    // Different delivered rows, or seqs, get different IDs; a column
    // missing and a null one are alike.
    let c = cfg(false, false, r#"{"kind":"exclude","column":"ssn"}"#);
    let r = push(
        &c,
        &[
            (1, "", r#"{"a":1,"ssn":"x"}"#),
            (1, "", r#"{"a":2,"ssn":"x"}"#),
            (2, "", r#"{"a":1,"ssn":"x"}"#),
            (3, "", r#"{"a":1,"b":null}"#),
            (3, "", r#"{"a":1}"#),
            (4, "", r#"{"a":"1"}"#),
        ],
    );
    let v = ids(&r);
    assert_ne!(v[0], v[1]);
    assert_ne!(v[0], v[2]);
    assert_eq!(v[3], v[4]);
    assert!(r.column_by_name("a").unwrap().null_count() == 0);
}
