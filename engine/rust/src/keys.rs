//! Strict reading of the JSON the Go side hands the engine (the config,
//! its stream specs, policies and naming rules, a saved state, Parquet
//! options): a key the engine does not know is an error naming it, and a
//! flag that is not a boolean is an error too, never a silent `false`.

use serde_json::{Map, Value};

/// Fails with a message naming the first key of `m` (in key order) that is
/// not in `known`.
pub fn only(m: &Map<String, Value>, known: &[&str], what: &str) -> Result<(), String> {
    match m.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(format!(
            "{what}: unknown key {k:?} (known keys: {})",
            known.join(", ")
        )),
    }
}

/// Names an object for a message before it is checked: `"{kind} {name:?}"`
/// when its string `key` is there, else `anon`.
pub fn label(m: &Map<String, Value>, key: &str, kind: &str, anon: &str) -> String {
    match m.get(key).and_then(Value::as_str) {
        Some(n) => format!("{kind} {n:?}"),
        None => anon.to_string(),
    }
}

/// The boolean at `key`: false when absent or null, an error naming the
/// key when of another type.
pub fn flag(m: &Map<String, Value>, key: &str, what: &str) -> Result<bool, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(format!("{what}: {key:?} is {v}, not a boolean")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> Map<String, Value> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn unknown_keys_are_named() {
        assert!(only(&obj(r#"{"a":1,"b":2}"#), &["a", "b"], "x").is_ok());
        let e = only(&obj(r#"{"a":1,"bb":2}"#), &["a", "b"], "thing").unwrap_err();
        assert_eq!(e, r#"thing: unknown key "bb" (known keys: a, b)"#);
    }

    #[test]
    fn flags_are_booleans() {
        let m = obj(r#"{"t":true,"n":null,"s":"yes"}"#);
        assert_eq!(flag(&m, "t", "x"), Ok(true));
        assert_eq!(flag(&m, "n", "x"), Ok(false));
        assert_eq!(flag(&m, "absent", "x"), Ok(false));
        assert_eq!(
            flag(&m, "s", "x").unwrap_err(),
            r#"x: "s" is "yes", not a boolean"#
        );
    }
}
