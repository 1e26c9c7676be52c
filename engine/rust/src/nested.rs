//! Nested JSON values: objects become structs and arrays lists, with their
//! children widened by the same lattice as top-level columns. A column
//! whose values disagree in shape (an object meeting an array or a
//! scalar), or nest deeper than [`MAX_NESTED_DEPTH`], holds JSON text
//! (utf8) instead, from then on.
//!
//! Struct fields are ordered by name (the order serde_json's map keeps),
//! so a struct's shape does not depend on the order documents list keys.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, ListArray, NullArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields};
use serde_json::{Value, json};

use crate::error::Error;

/// The deepest nesting kept as structs and lists (the column is level 1);
/// deeper values are JSON text.
pub const MAX_NESTED_DEPTH: usize = 8;

/// The type of a nested value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JType {
    Null,
    Bool,
    Int64,
    Float64,
    Utf8,
    List(Box<JType>),
    Struct(Vec<(String, JType)>),
}

impl JType {
    /// The type of `v` at nesting level `depth` (1 for a column's value).
    pub fn of(v: &Value, depth: usize) -> JType {
        match v {
            Value::Null => JType::Null,
            Value::Bool(_) => JType::Bool,
            Value::Number(n) => {
                if n.as_i64().is_some() {
                    JType::Int64
                } else if n.is_u64() {
                    JType::Utf8
                } else {
                    // arbitrary_precision: the number keeps its text; one
                    // that f64 can't hold (overflow) stays text.
                    match n.as_f64() {
                        Some(f) if f.is_finite() && !too_precise(&n.to_string()) => JType::Float64,
                        _ => JType::Utf8,
                    }
                }
            }
            Value::String(_) => JType::Utf8,
            _ if depth > MAX_NESTED_DEPTH => JType::Utf8,
            Value::Array(a) => JType::List(Box::new(
                a.iter()
                    .fold(JType::Null, |t, e| t.join(&JType::of(e, depth + 1))),
            )),
            Value::Object(m) => JType::struct_of(
                m.iter()
                    .map(|(k, v)| (k.clone(), JType::of(v, depth + 1)))
                    .collect(),
            ),
        }
    }

    /// The struct of fields `f` (sorted, unique), or utf8 when two names
    /// are equal but for case: readers of Parquet and Iceberg fold case,
    /// and nested fields are not renamed, so the object is JSON text.
    pub(crate) fn struct_of(f: Vec<(String, JType)>) -> JType {
        if f.len() > 1 && case_clash(&f) {
            JType::Utf8
        } else {
            JType::Struct(f)
        }
    }

    /// A field name in the shape that no destination takes: one holding
    /// a NUL byte (the C Data Interface carries names as C strings) or
    /// an empty one (Iceberg requires a name; nested fields are not
    /// renamed).
    pub fn bad_name(&self) -> Option<&str> {
        match self {
            JType::List(e) => e.bad_name(),
            JType::Struct(f) => f.iter().find_map(|(k, t)| {
                if k.is_empty() || k.contains('\0') {
                    Some(k.as_str())
                } else {
                    t.bad_name()
                }
            }),
            _ => None,
        }
    }

    /// The class of this position's type, as [`crate::hold::type_class`]
    /// names them.
    fn class(&self) -> &'static str {
        match self {
            JType::Null => "null",
            JType::Bool => "bool",
            JType::Int64 => "int",
            JType::Float64 => "float64",
            JType::Utf8 => "utf8",
            JType::List(_) => "list",
            JType::Struct(_) => "struct",
        }
    }

    /// Whether [`JType::writable`] would leave something out.
    pub fn needs_pruning(&self, unsupported: &[String]) -> bool {
        if unsupported.iter().any(|u| u == self.class()) {
            return true;
        }
        match self {
            JType::List(e) => e.needs_pruning(unsupported),
            JType::Struct(f) => f.is_empty() || f.iter().any(|(_, t)| t.needs_pruning(unsupported)),
            _ => false,
        }
    }

    /// The part of this shape a destination can write, `None` when
    /// nothing is left. Left out are positions of a class in
    /// `unsupported` (the destination's, see [`crate::hold`]) and
    /// positions that have only ever seen empty objects: a struct needs
    /// a field (Parquet can't write one without). A struct field left
    /// out is absent from the struct; a list whose element is left out,
    /// and a struct whose fields all are, is left out itself.
    pub fn writable(&self, unsupported: &[String]) -> Option<JType> {
        if unsupported.iter().any(|u| u == self.class()) {
            return None;
        }
        match self {
            JType::List(e) => e.writable(unsupported).map(|e| JType::List(Box::new(e))),
            JType::Struct(f) => {
                let kept: Vec<(String, JType)> = f
                    .iter()
                    .filter_map(|(k, t)| t.writable(unsupported).map(|t| (k.clone(), t)))
                    .collect();
                (!kept.is_empty()).then_some(JType::Struct(kept))
            }
            t => Some(t.clone()),
        }
    }

    pub fn is_nested(&self) -> bool {
        matches!(self, JType::List(_) | JType::Struct(_))
    }

    /// The smallest type holding both; conflicting shapes are utf8.
    pub fn join(&self, o: &JType) -> JType {
        use JType::*;
        match (self, o) {
            (a, b) if a == b => a.clone(),
            (Null, x) | (x, Null) => x.clone(),
            (Int64, Float64) | (Float64, Int64) => Float64,
            (List(a), List(b)) => List(Box::new(a.join(b))),
            (Struct(a), Struct(b)) => {
                let mut out = a.clone();
                for (k, t) in b {
                    match out.iter_mut().find(|(n, _)| n == k) {
                        Some((_, u)) => *u = u.join(t),
                        None => out.push((k.clone(), t.clone())),
                    }
                }
                out.sort_by(|x, y| x.0.cmp(&y.0));
                JType::struct_of(out)
            }
            _ => Utf8,
        }
    }

    pub fn data_type(&self) -> DataType {
        match self {
            JType::Null => DataType::Null,
            JType::Bool => DataType::Boolean,
            JType::Int64 => DataType::Int64,
            JType::Float64 => DataType::Float64,
            JType::Utf8 => DataType::Utf8,
            JType::List(e) => DataType::List(Arc::new(Field::new("item", e.data_type(), true))),
            JType::Struct(f) => DataType::Struct(fields(f)),
        }
    }

    /// The saved form: a type name, `{"list":T}` or `{"struct":[[name,T]...]}`.
    pub fn to_json(&self) -> Value {
        match self {
            JType::Null => json!("null"),
            JType::Bool => json!("bool"),
            JType::Int64 => json!("int64"),
            JType::Float64 => json!("float64"),
            JType::Utf8 => json!("utf8"),
            JType::List(e) => json!({"list": e.to_json()}),
            JType::Struct(f) => {
                json!({"struct": f.iter().map(|(k, t)| json!([k, t.to_json()])).collect::<Vec<_>>()})
            }
        }
    }

    pub fn from_json(v: &Value) -> Option<JType> {
        Some(match v {
            Value::String(s) => match s.as_str() {
                "null" => JType::Null,
                "bool" => JType::Bool,
                "int64" => JType::Int64,
                "float64" => JType::Float64,
                "utf8" => JType::Utf8,
                _ => return None,
            },
            Value::Object(m) if m.len() == 1 => {
                if let Some(e) = m.get("list") {
                    JType::List(Box::new(JType::from_json(e)?))
                } else {
                    let list = m.get("struct")?.as_array()?;
                    let mut out = Vec::with_capacity(list.len());
                    for p in list {
                        let p = p.as_array()?;
                        if p.len() != 2 {
                            return None;
                        }
                        out.push((p[0].as_str()?.to_string(), JType::from_json(&p[1])?));
                    }
                    JType::Struct(out)
                }
            }
            _ => return None,
        })
    }
}

/// Whether two of the (distinct) names of `f` are equal but for case.
fn case_clash(f: &[(String, JType)]) -> bool {
    let mut names: Vec<String> = f.iter().map(|(k, _)| k.to_lowercase()).collect();
    names.sort_unstable();
    names.windows(2).any(|w| w[0] == w[1])
}

/// Whether a number's text is not exactly a float64 (more than 15
/// significant digits that don't round-trip): such numbers inside nested
/// values are kept as text (decimal inference is for top-level fields).
pub(crate) fn too_precise(text: &str) -> bool {
    if text.contains(['e', 'E']) {
        return false;
    }
    let t = text.trim_start_matches('-');
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let sig = int
        .bytes()
        .chain(frac.bytes())
        .skip_while(|&d| d == b'0')
        .count();
    sig > 15
        && !text
            .parse::<f64>()
            .is_ok_and(|f| crate::json::roundtrips(int.as_bytes(), frac.as_bytes(), f))
}

pub(crate) fn fields(f: &[(String, JType)]) -> Fields {
    f.iter()
        .map(|(k, t)| Field::new(k.as_str(), t.data_type(), true))
        .collect()
}

/// Builds the array of type `t` from one value per row (`None` or JSON
/// null is a null row).
pub fn build(t: &JType, vals: &[Option<&Value>]) -> Result<ArrayRef, Error> {
    let n = vals.len();
    let present = |v: &Option<&Value>| v.is_some_and(|v| !v.is_null());
    Ok(match t {
        JType::Null => Arc::new(NullArray::new(n)),
        JType::Bool => {
            let mut b = BooleanBuilder::with_capacity(n);
            vals.iter()
                .for_each(|v| b.append_option(v.and_then(Value::as_bool)));
            Arc::new(b.finish())
        }
        JType::Int64 => {
            let mut b = Int64Builder::with_capacity(n);
            vals.iter()
                .for_each(|v| b.append_option(v.and_then(Value::as_i64)));
            Arc::new(b.finish())
        }
        JType::Float64 => {
            let mut b = Float64Builder::with_capacity(n);
            vals.iter()
                .for_each(|v| b.append_option(v.and_then(Value::as_f64)));
            Arc::new(b.finish())
        }
        JType::Utf8 => {
            let mut b = StringBuilder::with_capacity(n, 16 * n);
            for v in vals {
                match v {
                    None | Some(Value::Null) => b.append_null(),
                    Some(Value::String(s)) => b.append_value(s),
                    // Numbers keep their text (arbitrary_precision); nested
                    // values become compact JSON text.
                    Some(other) => b.append_value(other.to_string()),
                }
            }
            Arc::new(b.finish())
        }
        JType::List(e) => {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let mut child: Vec<Option<&Value>> = Vec::new();
            let mut valid = Vec::with_capacity(n);
            for v in vals {
                if let Some(Value::Array(a)) = v {
                    child.extend(a.iter().map(Some));
                    valid.push(true);
                } else {
                    valid.push(false);
                }
                offsets.push(
                    i32::try_from(child.len())
                        .map_err(|_| Error::internal("a list column over 2^31 elements"))?,
                );
            }
            let values = build(e, &child)?;
            let nulls = NullBuffer::from(valid);
            Arc::new(ListArray::try_new(
                Arc::new(Field::new("item", e.data_type(), true)),
                OffsetBuffer::new(offsets.into()),
                values,
                (nulls.null_count() > 0).then_some(nulls),
            )?)
        }
        JType::Struct(f) => {
            let mut cols = Vec::with_capacity(f.len());
            let mut child: Vec<Option<&Value>> = Vec::with_capacity(n);
            for (k, ft) in f {
                child.clear();
                child.extend(vals.iter().map(|v| match v {
                    Some(Value::Object(m)) => m.get(k),
                    _ => None,
                }));
                cols.push(build(ft, &child)?);
            }
            let nulls = NullBuffer::from_iter(vals.iter().map(present));
            if f.is_empty() {
                Arc::new(StructArray::new_empty_fields(
                    n,
                    (nulls.null_count() > 0).then_some(nulls),
                ))
            } else {
                Arc::new(StructArray::try_new(
                    fields(f),
                    cols,
                    (nulls.null_count() > 0).then_some(nulls),
                )?)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    fn ty(s: &str) -> JType {
        JType::of(&serde_json::from_str(s).unwrap(), 1)
    }

    #[test]
    fn shapes_and_widening() {
        let a = ty(r#"{"x":1,"y":[1,2]}"#);
        assert_eq!(
            a,
            JType::Struct(vec![
                ("x".into(), JType::Int64),
                ("y".into(), JType::List(Box::new(JType::Int64)))
            ])
        );
        let b = ty(r#"{"x":1.5,"z":"s","y":[]}"#);
        let j = a.join(&b);
        assert_eq!(
            j,
            JType::Struct(vec![
                ("x".into(), JType::Float64),
                ("y".into(), JType::List(Box::new(JType::Int64))),
                ("z".into(), JType::Utf8)
            ])
        );
        assert_eq!(ty("[1,\"a\"]"), JType::List(Box::new(JType::Utf8)));
        assert_eq!(ty("[1,{\"a\":1}]"), JType::List(Box::new(JType::Utf8)));
        assert_eq!(ty("{}").join(&ty("[]")), JType::Utf8);
        assert_eq!(
            ty("[18446744073709551615]"),
            JType::List(Box::new(JType::Utf8))
        );
        let deep = format!("{}1{}", "[".repeat(12), "]".repeat(12));
        let mut t = ty(&deep);
        let mut levels = 0;
        while let JType::List(e) = t {
            levels += 1;
            t = *e;
        }
        assert_eq!((levels, t), (MAX_NESTED_DEPTH, JType::Utf8));
        for s in [r#"{"x":1,"y":[1,2]}"#, "[[null]]", "{}"] {
            let t = ty(s);
            assert_eq!(JType::from_json(&t.to_json()), Some(t));
        }
    }

    #[test]
    fn builds_arrays() {
        let docs: Vec<Value> = [r#"{"x":1,"y":["a"]}"#, r#"{"x":2.5}"#, "null"]
            .iter()
            .map(|s| serde_json::from_str(s).unwrap())
            .collect();
        let t = docs
            .iter()
            .fold(JType::Null, |t, d| t.join(&JType::of(d, 1)));
        let vals: Vec<Option<&Value>> = docs.iter().map(Some).collect();
        let a = build(&t, &vals).unwrap();
        assert_eq!(a.data_type(), &t.data_type());
        assert_eq!(a.len(), 3);
        assert!(a.is_null(2) && !a.is_null(1));
        let s = a.as_any().downcast_ref::<StructArray>().unwrap();
        assert!(s.column(1).is_null(1), "missing y is null");
    }
}
