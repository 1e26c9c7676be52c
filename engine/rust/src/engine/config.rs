//! The engine config as the C surface receives it: stream specs, naming
//! rules; and applying destination names to an output schema.

use std::collections::{HashMap, HashSet};

use arrow_schema::{Field, Schema};
use serde_json::Value;

use super::{Config, Engine, StreamSpec};
use crate::decl::Types;
use crate::error::Error;
use crate::hold;
use crate::policy::Policies;
use crate::state::{self, Policy};
use crate::{keys, meta, names};

/// The keys of a stream spec.
const SPEC_KEYS: &[&str] = &[
    "name",
    "format",
    "types",
    "columns",
    "policy",
    "nested_text",
    "timestamps",
    "keyed",
    "key_columns",
    "policies",
];

/// Parses one stream spec of the config:
/// `{"name","format":"json"|"row","types":"postgres"|"mysql","columns":[...],"policy",
/// "nested_text","timestamps","keyed","key_columns","policies"}`; unknown keys are refused.
fn parse_spec(v: &Value) -> Result<StreamSpec, String> {
    let m = v.as_object().ok_or("a stream spec is not an object")?;
    keys::only(
        m,
        SPEC_KEYS,
        &keys::label(m, "name", "stream", "a stream spec"),
    )?;
    let name = m
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("a stream spec has no name")?;
    let policy = match m.get("policy") {
        None | Some(Value::Null) => Policy::Evolve,
        Some(p) => p
            .as_str()
            .and_then(Policy::from_name)
            .ok_or_else(|| format!("stream {name:?}: unknown policy {p}"))?,
    };
    let text = |k: &str| match m.get(k) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(other) => Err(format!("stream {name:?}: {k:?} is {other}, not a string")),
    };
    let declared = match text("format")? {
        "" | "json" => None,
        "row" => {
            let types = text("types")?;
            let types = Types::from_name(types)
                .ok_or_else(|| format!("stream {name:?}: unknown type system {types:?}"))?;
            let cols = m
                .get("columns")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("stream {name:?}: a row stream needs columns"))?;
            Some(state::declared_from_json(types, cols, name)?)
        }
        other => return Err(format!("stream {name:?}: unknown format {other:?}")),
    };
    let what = format!("stream {name:?}");
    let flag = |k: &str| keys::flag(m, k, &what);
    let key_columns = match m.get("key_columns") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("stream {name:?}: key_columns is not a list of names"))?,
        Some(_) => {
            return Err(format!(
                "stream {name:?}: key_columns is not a list of names"
            ));
        }
    };
    let policies = match m.get("policies") {
        None | Some(Value::Null) => Policies::default(),
        Some(p) => Policies::from_json(p).map_err(|e| format!("stream {name:?}: policies: {e}"))?,
    };
    Ok(StreamSpec {
        policies,
        key_columns,
        name: name.to_string(),
        policy,
        declared,
        opts: state::JsonOpts {
            nested_text: flag("nested_text")?,
            timestamps: flag("timestamps")?,
            keyed: flag("keyed")?,
        },
    })
}

/// The key of the output schema's metadata holding the destination table
/// name, when naming rules are in force.
pub const TABLE_METADATA_KEY: &str = "openetl.table";

/// Renames `fields` (a stream's source columns) to their destination
/// names, giving names as needed (without rules too: see
/// [`names::Rules::active`]), and returns the stream's destination table
/// name; `None` when no rules are in force and none was ever given.
pub(super) fn apply_names(
    rules: &names::Rules,
    tables: &mut HashSet<String>,
    stream_names: &mut names::StreamNames,
    stream: &str,
    fields: &mut [Field],
    pol: Option<&Policies>,
) -> Option<String> {
    // Column names are unique ignoring case under any rules, none
    // included: readers of Parquet and Iceberg fold case. A renamed
    // column is named from its new name; a column shadowed by a rename
    // is left out by the policies, unnamed.
    for f in fields.iter_mut() {
        let key = match pol {
            None => f.name().as_str(),
            Some(p) if p.shadowed(f.name()) => continue,
            Some(p) => p.naming_key(f.name()),
        };
        let d = stream_names.column(rules, key, &meta::NAMES).to_string();
        if d != *f.name() {
            *f = f.clone().with_name(d);
        }
    }
    if !rules.active() && stream_names.table.is_none() {
        return None;
    }
    let table = match &stream_names.table {
        Some(t) => t.clone(),
        None => {
            let t = rules.unique(&rules.base(stream), tables);
            tables.insert(t.to_lowercase());
            stream_names.table = Some(t.clone());
            t
        }
    };
    Some(table)
}

/// Gives `stream` (its schema `st`) its destination names ahead of its
/// first push, as that push would: a declared stream's columns in
/// declared order, then the table name under active rules. Names it
/// already has are kept.
pub(super) fn name_ahead(
    rules: &names::Rules,
    tables: &mut HashSet<String>,
    st: &mut state::StreamSchema,
    stream: &str,
    pol: Option<&Policies>,
) {
    if let Some(d) = &st.declared {
        for c in &d.columns {
            let key = pol.map_or(c.name.as_str(), |p| p.naming_key(&c.name));
            st.names.column(rules, key, &meta::NAMES);
        }
    }
    if rules.active() && st.names.table.is_none() {
        let t = rules.unique(&rules.base(stream), tables);
        tables.insert(t.to_lowercase());
        st.names.table = Some(t);
    }
}

pub(super) fn out_schema(fields: Vec<Field>, table: Option<String>) -> Schema {
    match table {
        None => Schema::new(fields),
        Some(t) => {
            Schema::new_with_metadata(fields, HashMap::from([(TABLE_METADATA_KEY.to_string(), t)]))
        }
    }
}

fn parse_naming(v: &Value) -> Result<names::Rules, String> {
    let m = v.as_object().ok_or("not an object")?;
    let mut r = names::Rules::default();
    for (k, v) in m {
        match k.as_str() {
            "max_len" => r.max_len = v.as_u64().ok_or("max_len is not a number")? as usize,
            "case" => {
                r.case = match v.as_str().ok_or("case is not a string")? {
                    "" | "keep" => names::Case::Keep,
                    "lower" => names::Case::Lower,
                    "upper" => names::Case::Upper,
                    other => return Err(format!("unknown case {other:?}")),
                }
            }
            "simple" => r.simple = v.as_bool().ok_or("simple is not a bool")?,
            "reserved" => {
                for w in v.as_array().ok_or("reserved is not a list")? {
                    r.reserved.push(
                        w.as_str()
                            .ok_or("a reserved word is not a string")?
                            .to_string(),
                    );
                }
            }
            other => return Err(format!("unknown key {other:?}")),
        }
    }
    if r.max_len > 0 && r.max_len < 8 {
        return Err(format!("max_len {} is too short (at least 8)", r.max_len));
    }
    Ok(r)
}

impl Engine {
    /// Parses a config as the C surface receives it:
    /// `{"lanes":N,"max_document_bytes":N,"state":<state or null>}`, where
    /// the state is the JSON value [`Engine::state`] wrote, or a string
    /// holding it (the header, engine/include/openetl_engine.h, lists
    /// every key). A key it does not know, at any depth, is an
    /// `InvalidInput` error naming it (see [`crate::keys`]). A flawed
    /// state, an unknown key in it included, is an `InvalidState` error.
    pub fn from_config_json(b: &[u8]) -> Result<Engine, Error> {
        let v: Value = serde_json::from_slice(b)
            .map_err(|e| Error::invalid_input(format!("engine config: {e}")))?;
        let m = v
            .as_object()
            .ok_or_else(|| Error::invalid_input("engine config is not an object"))?;
        let mut cfg = Config::default();
        let mut state = None;
        for (k, v) in m {
            match k.as_str() {
                "lanes" => {
                    cfg.lanes =
                        v.as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| {
                                Error::invalid_input(
                                    "engine config: lanes is not a small unsigned integer",
                                )
                            })?;
                }
                "max_document_bytes" => {
                    cfg.max_document_bytes = v
                        .as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| {
                            Error::invalid_input(
                                "engine config: max_document_bytes is not an unsigned integer",
                            )
                        })?;
                }
                "state" => match v {
                    Value::Null => {}
                    Value::String(s) => {
                        let parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                            Error::invalid_state(format!("engine state: not JSON: {e}"))
                        })?;
                        state = Some(parsed);
                    }
                    other => state = Some(other.clone()),
                },
                "unsupported" => {
                    for t in v.as_array().ok_or_else(|| {
                        Error::invalid_input("engine config: unsupported is not a list")
                    })? {
                        let t = t
                            .as_str()
                            .filter(|t| hold::CLASSES.contains(t))
                            .ok_or_else(|| {
                                Error::invalid_input(format!(
                                    "engine config: unsupported type {t} is not one of {:?}",
                                    hold::CLASSES
                                ))
                            })?;
                        cfg.unsupported.push(t.to_string());
                    }
                }
                "naming" => {
                    cfg.naming = parse_naming(v)
                        .map_err(|e| Error::invalid_input(format!("engine config: naming: {e}")))?;
                }
                "tables" => {
                    for t in v.as_array().ok_or_else(|| {
                        Error::invalid_input("engine config: tables is not a list")
                    })? {
                        let t = t.as_str().ok_or_else(|| {
                            Error::invalid_input("engine config: a table stream is not a string")
                        })?;
                        cfg.tables.push(t.to_string());
                    }
                }
                "streams" => {
                    let list = v.as_array().ok_or_else(|| {
                        Error::invalid_input("engine config: streams is not a list")
                    })?;
                    for sv in list {
                        cfg.streams
                            .push(parse_spec(sv).map_err(|e| {
                                Error::invalid_input(format!("engine config: {e}"))
                            })?);
                    }
                }
                other => {
                    return Err(Error::invalid_input(format!(
                        "engine config: unknown key {other:?}"
                    )));
                }
            }
        }
        Engine::new(cfg, state.as_ref())
    }
}
