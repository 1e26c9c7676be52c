//! What an engine must carry across attempts: each stream's columns (name
//! and type, in order). Saved as JSON in the checkpoint record:
//!
//! ```json
//! {"version":1,"streams":[{"name":"orders","columns":[{"name":"id","type":"int64"}]}]}
//! ```
//!
//! Streams are written sorted by name so equal states are equal bytes.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::decl::{Decl, Types};
use crate::error::Error;
use crate::infer::ColumnType;
use crate::keys;
use crate::meta::RESERVED_PREFIX;
use crate::names::StreamNames;
use crate::nested::JType;
use crate::rows::{DeclColumn, DeclStream};

/// A stream's schema policy: what a document that would change the schema
/// does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// New columns are added and types widened (the default).
    #[default]
    Evolve,
    /// The schema does not change: a document with a new field or a value
    /// that would widen a column is quarantined `type_conflict`.
    Freeze,
    /// New fields are dropped from documents; types still widen.
    Discard,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Evolve => "evolve",
            Policy::Freeze => "freeze",
            Policy::Discard => "discard",
        }
    }

    pub fn from_name(s: &str) -> Option<Policy> {
        match s {
            "" | "evolve" => Some(Policy::Evolve),
            "freeze" => Some(Policy::Freeze),
            "discard" => Some(Policy::Discard),
            _ => None,
        }
    }
}

/// Parses a declared column list `[{"name","type","nullable"}]`.
pub fn declared_from_json(types: Types, cols: &[Value], what: &str) -> Result<DeclStream, String> {
    let mut out = Vec::with_capacity(cols.len());
    for c in cols {
        let m = c
            .as_object()
            .ok_or_else(|| format!("{what}: a column is not an object"))?;
        let col = format!("{what}: {}", keys::label(m, "name", "column", "a column"));
        keys::only(m, &["name", "type", "nullable", "key"], &col)?;
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{what}: a column has no name"))?;
        let ty = m
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{what}: column {name:?} has no type"))?;
        let nullable = match m.get("nullable") {
            None | Some(Value::Null) => true,
            Some(_) => keys::flag(m, "nullable", &col)?,
        };
        let key = keys::flag(m, "key", &col)?;
        if name.is_empty() || crate::meta::is_reserved(name) || name.contains('\0') {
            return Err(format!(
                "{what}: column name {name:?} is empty, holds a NUL byte or uses the prefix {RESERVED_PREFIX:?} (in any case), reserved for metadata columns"
            ));
        }
        if out.iter().any(|c: &DeclColumn| c.name == name) {
            return Err(format!("{what}: column {name:?} is declared twice"));
        }
        let decl = Decl::parse(types, ty).map_err(|e| format!("{what}: column {name:?}: {e}"))?;
        out.push(DeclColumn {
            name: name.to_string(),
            type_name: ty.to_string(),
            decl,
            nullable,
            key,
        });
    }
    Ok(DeclStream {
        types,
        columns: out,
    })
}

fn declared_to_json(d: &DeclStream) -> Value {
    Value::Array(
        d.columns
            .iter()
            .map(|c| {
                let mut v = json!({"name": c.name, "type": c.type_name, "nullable": c.nullable});
                if c.key {
                    v["key"] = Value::Bool(true);
                }
                v
            })
            .collect(),
    )
}

/// The version written; loading refuses any other.
pub const VERSION: u64 = 1;

/// One column of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    /// The shape of a [`ColumnType::Nested`] column.
    pub tree: Option<JType>,
}

impl Column {
    pub fn data_type(&self) -> arrow_schema::DataType {
        match (&self.ty, &self.tree) {
            (ColumnType::Nested, Some(t)) => t.data_type(),
            (ty, _) => ty.data_type(),
        }
    }
}

/// Per-stream inference options for JSON documents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JsonOpts {
    /// Nested objects and arrays stay JSON text (utf8) instead of
    /// structs and lists.
    pub nested_text: bool,
    /// Strings that are RFC 3339 timestamps are typed timestamp[us, UTC].
    pub timestamps: bool,
    /// The stream has a primary key: a record without one is quarantined
    /// `missing_key` (JSON and row streams alike).
    pub keyed: bool,
}

/// A stream's inferred schema. Columns only ever get added at the end and
/// widened, except that a document being rejected undoes its own additions.
#[derive(Clone, Debug, Default)]
pub struct StreamSchema {
    pub columns: Vec<Column>,
    index: HashMap<String, u32>,
    pub policy: Policy,
    pub opts: JsonOpts,
    /// Destination names given to the stream and its columns.
    pub names: StreamNames,
    /// The declared schema of a row (FormatRow) stream; `None` for JSON.
    pub declared: Option<DeclStream>,
}

impl StreamSchema {
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// The index of the column named `name`.
    #[inline]
    pub fn lookup(&self, name: &str) -> Option<usize> {
        self.index.get(name).map(|&i| i as usize)
    }

    /// Appends a column; the caller has checked the name is new.
    pub fn add(&mut self, name: &str, ty: ColumnType) -> usize {
        let i = self.columns.len();
        self.columns.push(Column {
            name: name.to_string(),
            ty,
            tree: None,
        });
        self.index.insert(name.to_string(), i as u32);
        i
    }

    /// Drops the columns from `n` on (undoing a rejected document).
    pub fn truncate(&mut self, n: usize) {
        for c in self.columns.drain(n..) {
            self.index.remove(&c.name);
        }
    }
}

/// Serializes the streams' schemas.
pub fn export(streams: &HashMap<String, StreamSchema>) -> Vec<u8> {
    let mut names: Vec<&String> = streams.keys().collect();
    names.sort();
    let list: Vec<Value> = names
        .into_iter()
        .map(|name| {
            let cols: Vec<Value> = streams[name]
                .columns
                .iter()
                .map(|c| {
                    let mut v = json!({"name": c.name, "type": c.ty.name()});
                    if let ColumnType::Decimal { scale, int_digits } = c.ty {
                        v["scale"] = json!(scale);
                        v["int_digits"] = json!(int_digits);
                    }
                    if let Some(t) = &c.tree {
                        v["tree"] = t.to_json();
                    }
                    v
                })
                .collect();
            let st = &streams[name];
            let mut v = json!({"name": name, "columns": cols});
            if st.policy != Policy::Evolve {
                v["policy"] = json!(st.policy.name());
            }
            if st.names.table.is_some() || !st.names.columns.is_empty() {
                v["names"] = st.names.to_json();
            }
            if st.opts.nested_text {
                v["nested_text"] = json!(true);
            }
            if st.opts.timestamps {
                v["timestamps"] = json!(true);
            }
            if st.opts.keyed {
                v["keyed"] = json!(true);
            }
            if let Some(d) = &st.declared {
                v["types"] = json!(d.types.name());
                v["declared"] = declared_to_json(d);
            }
            v
        })
        .collect();
    let v = json!({"version": VERSION, "streams": list});
    v.to_string().into_bytes()
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_state(format!("engine state: {}", msg.into()))
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, Error> {
    v.as_object()
        .ok_or_else(|| bad(format!("{what} is not an object")))
}

fn string<'a>(m: &'a Map<String, Value>, key: &str, what: &str) -> Result<&'a str, Error> {
    m.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{what} has no string {key:?}")))
}

/// The keys of a stream in the state ([`export`] writes them).
const STREAM_KEYS: &[&str] = &[
    "name",
    "columns",
    "policy",
    "names",
    "nested_text",
    "timestamps",
    "keyed",
    "types",
    "declared",
];

/// The keys of a column in the state.
const COLUMN_KEYS: &[&str] = &["name", "type", "scale", "int_digits", "tree"];

/// Loads streams' schemas from a value written by [`export`]. Any flaw,
/// an unknown key included, is an [`crate::error::Status::InvalidState`]
/// error.
pub fn import(v: &Value) -> Result<HashMap<String, StreamSchema>, Error> {
    let top = object(v, "the state")?;
    keys::only(top, &["version", "streams"], "the state").map_err(bad)?;
    match top.get("version").and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(other) => {
            return Err(bad(format!(
                "version {other} is not supported (want {VERSION})"
            )));
        }
        None => return Err(bad("no version")),
    }
    let list = top
        .get("streams")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no streams list"))?;
    let mut streams = HashMap::with_capacity(list.len());
    for s in list {
        let s = object(s, "a stream")?;
        keys::only(
            s,
            STREAM_KEYS,
            &keys::label(s, "name", "stream", "a stream"),
        )
        .map_err(bad)?;
        let name = string(s, "name", "a stream")?;
        if name.is_empty() {
            return Err(bad("a stream has an empty name"));
        }
        let what = format!("stream {name:?}");
        let cols = s
            .get("columns")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(format!("stream {name:?} has no columns list")))?;
        let mut schema = StreamSchema::default();
        for c in cols {
            let c = object(c, "a column")?;
            let col = keys::label(c, "name", "column", "a column");
            keys::only(c, COLUMN_KEYS, &format!("{what} {col}")).map_err(bad)?;
            let cname = string(c, "name", "a column")?;
            let ty = string(c, "type", "a column")?;
            let ty = if ty == "decimal" {
                let n = |k: &str| c.get(k).and_then(Value::as_u64).filter(|&v| v <= 38);
                match (n("scale"), n("int_digits")) {
                    (Some(s), Some(i)) if s + i <= 38 => ColumnType::Decimal {
                        scale: s as u8,
                        int_digits: i as u8,
                    },
                    _ => {
                        return Err(bad(format!(
                            "stream {name:?} column {cname:?} has a bad decimal shape"
                        )));
                    }
                }
            } else {
                ColumnType::from_name(ty).ok_or_else(|| {
                    bad(format!(
                        "stream {name:?} column {cname:?} has unknown type {ty:?}"
                    ))
                })?
            };
            if cname.starts_with(RESERVED_PREFIX) {
                return Err(bad(format!(
                    "stream {name:?} column {cname:?} uses the reserved prefix"
                )));
            }
            if schema.lookup(cname).is_some() {
                return Err(bad(format!("stream {name:?} has column {cname:?} twice")));
            }
            let i = schema.add(cname, ty);
            match (ty, c.get("tree")) {
                (ColumnType::Nested, Some(t)) => {
                    let t = JType::from_json(t)
                        .filter(JType::is_nested)
                        .ok_or_else(|| {
                            bad(format!("stream {name:?} column {cname:?} has a bad tree"))
                        })?;
                    schema.columns[i].tree = Some(t);
                }
                (ColumnType::Nested, None) | (_, Some(_)) => {
                    return Err(bad(format!(
                        "stream {name:?} column {cname:?}: a tree goes with type nested only"
                    )));
                }
                _ => {}
            }
        }
        if let Some(n) = s.get("names") {
            if let Some(m) = n.as_object() {
                keys::only(m, &["table", "columns"], &format!("{what} names")).map_err(bad)?;
            }
            schema.names = StreamNames::from_json(n, &crate::meta::NAMES)
                .ok_or_else(|| bad(format!("stream {name:?} has bad names")))?;
        }
        schema.opts.nested_text = keys::flag(s, "nested_text", &what).map_err(bad)?;
        schema.opts.timestamps = keys::flag(s, "timestamps", &what).map_err(bad)?;
        schema.opts.keyed = keys::flag(s, "keyed", &what).map_err(bad)?;
        if let Some(p) = s.get("policy") {
            schema.policy = p
                .as_str()
                .and_then(Policy::from_name)
                .ok_or_else(|| bad(format!("stream {name:?} has an unknown policy")))?;
        }
        if let Some(d) = s.get("declared") {
            let types = s
                .get("types")
                .and_then(Value::as_str)
                .and_then(Types::from_name)
                .ok_or_else(|| bad(format!("stream {name:?} has no known types")))?;
            let cols = d
                .as_array()
                .ok_or_else(|| bad(format!("stream {name:?} declared is not a list")))?;
            schema.declared = Some(declared_from_json(types, cols, name).map_err(bad)?);
        }
        if streams.insert(name.to_string(), schema).is_some() {
            return Err(bad(format!("stream {name:?} appears twice")));
        }
    }
    Ok(streams)
}

/// Loads a state from bytes.
pub fn import_bytes(b: &[u8]) -> Result<HashMap<String, StreamSchema>, Error> {
    let v: Value = serde_json::from_slice(b).map_err(|e| bad(format!("not JSON: {e}")))?;
    import(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut streams = HashMap::new();
        let mut a = StreamSchema::default();
        a.add("id", ColumnType::Int64);
        a.add("name", ColumnType::Utf8);
        a.add("z", ColumnType::Null);
        streams.insert("b".to_string(), a);
        let mut b = StreamSchema::default();
        b.add("x", ColumnType::Float64);
        b.add("ok", ColumnType::Bool);
        streams.insert("a".to_string(), b);
        let bytes = export(&streams);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"streams":[{"columns":[{"name":"x","type":"float64"},{"name":"ok","type":"bool"}],"name":"a"},{"columns":[{"name":"id","type":"int64"},{"name":"name","type":"utf8"},{"name":"z","type":"null"}],"name":"b"}],"version":1}"#
        );
        let back = import_bytes(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back["b"].columns, streams["b"].columns);
        assert_eq!(back["a"].columns, streams["a"].columns);
        assert_eq!(export(&back), bytes);
    }

    #[test]
    fn rejects_corrupt_states() {
        let cases = [
            "",
            "{",
            "[]",
            r#"{"streams":[]}"#,
            r#"{"version":2,"streams":[]}"#,
            r#"{"version":1}"#,
            r#"{"version":1,"streams":[{"name":"a"}]}"#,
            r#"{"version":1,"streams":[{"name":"","columns":[]}]}"#,
            r#"{"version":1,"streams":[{"name":"a","columns":[{"name":"x","type":"int32"}]}]}"#,
            r#"{"version":1,"streams":[{"name":"a","columns":[{"name":"x","type":"int64"},{"name":"x","type":"utf8"}]}]}"#,
            r#"{"version":1,"streams":[{"name":"a","columns":[{"name":"_openetl_id","type":"utf8"}]}]}"#,
            r#"{"version":1,"streams":[{"name":"a","columns":[]},{"name":"a","columns":[]}]}"#,
        ];
        for c in cases {
            let err = import_bytes(c.as_bytes()).expect_err(c);
            assert_eq!(err.status, crate::error::Status::InvalidState, "{c}");
        }
    }

    #[test]
    fn truncate_undoes_adds() {
        let mut s = StreamSchema::default();
        s.add("a", ColumnType::Int64);
        s.add("b", ColumnType::Int64);
        s.truncate(1);
        assert_eq!(s.len(), 1);
        assert_eq!(s.lookup("b"), None);
        assert_eq!(s.lookup("a"), Some(0));
    }
}
