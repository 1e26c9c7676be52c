//! Per-stream column and row policies, applied to each push's output
//! before the metadata columns are added: a row filter over the source's
//! values, then the column rules (exclude, include, set null, keyed hash,
//! mask, truncate). Renames are applied by naming (see
//! [`Policies::naming_key`]): a renamed column is named from its new name.
//!
//! Everything is columnar and per batch: a filter is evaluated node by
//! node over whole columns ([`filter`]; on append streams the push runs
//! it before building the other columns, see [`decide`]), and each
//! rewritten column is built into one buffer; nothing is allocated per
//! row. Policies are configuration only:
//! none of this is in the engine's saved state (the hash key least of
//! all), and the key never appears in a message or a `Debug` output.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, BinaryArray, StringArray, make_array};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::{keys, meta};

pub mod filter;
pub use filter::{DROP, Decided, KEEP, SET_ASIDE, TO_DELETE, decide, gone};

/// A filter literal, typed.
#[derive(Clone, Debug, PartialEq)]
pub enum Lit {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A row condition. Comparisons follow SQL's three-valued logic: a null
/// value, a missing column or a value of a type the literal can't be
/// compared with is unknown; a row passes only when its condition is
/// true.
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    Cmp(String, CmpOp, Lit),
    IsNull(String),
    NotNull(String),
    In(String, Vec<Lit>),
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
}

/// An HMAC-SHA-256 key, prepared: the SHA-256 states after the key's
/// inner and outer pad blocks, so that a value costs only its own blocks
/// (two compressions for a value under 56 bytes). Its `Debug` shows
/// nothing of it.
#[derive(Clone)]
pub struct HmacKey {
    inner: [u32; 8],
    outer: [u32; 8],
    /// A digest of the key, for equality only (specs are compared).
    id: [u8; 32],
}

/// SHA-256's initial state.
const H0: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

type Block = sha2::digest::generic_array::GenericArray<u8, sha2::digest::consts::U64>;

#[inline(always)]
fn compress(state: &mut [u32; 8], block: &[u8; 64]) {
    sha2::compress256(state, std::slice::from_ref(Block::from_slice(block)));
}

/// Finishes a SHA-256 whose state has taken `done` bytes, over the rest
/// `tail` (any length), into the big-endian digest.
#[inline(always)]
fn finish(state: &mut [u32; 8], done: u64, tail: &[u8]) -> [u8; 32] {
    let mut chunks = tail.chunks_exact(64);
    for c in &mut chunks {
        let mut b = [0u8; 64];
        b.copy_from_slice(c);
        compress(state, &b);
    }
    let rest = chunks.remainder();
    let bits = (done + tail.len() as u64) * 8;
    let mut b = [0u8; 64];
    b[..rest.len()].copy_from_slice(rest);
    b[rest.len()] = 0x80;
    if rest.len() >= 56 {
        compress(state, &b);
        b = [0u8; 64];
    }
    b[56..].copy_from_slice(&bits.to_be_bytes());
    compress(state, &b);
    let mut d = [0u8; 32];
    for (o, w) in d.chunks_exact_mut(4).zip(state.iter()) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    d
}

impl HmacKey {
    pub fn new(key: &[u8]) -> HmacKey {
        let mut block = [0u8; 64];
        if key.len() > 64 {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let mut ipad = [0u8; 64];
        let mut opad = [0u8; 64];
        for i in 0..64 {
            ipad[i] = block[i] ^ 0x36;
            opad[i] = block[i] ^ 0x5c;
        }
        let (mut inner, mut outer) = (H0, H0);
        compress(&mut inner, &ipad);
        compress(&mut outer, &opad);
        let mut id = [0u8; 32];
        id.copy_from_slice(&Sha256::digest(block));
        HmacKey { inner, outer, id }
    }

    /// HMAC-SHA-256 of `v`.
    #[inline]
    pub fn digest(&self, v: &[u8]) -> [u8; 32] {
        let mut st = self.inner;
        let ih = finish(&mut st, 64, v);
        let mut st = self.outer;
        finish(&mut st, 64, &ih)
    }

    /// HMAC-SHA-256 of `v`, as 64 lowercase hex digits into `out`.
    #[inline]
    pub fn hex(&self, v: &[u8], out: &mut Vec<u8>) {
        let d = self.digest(v);
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 64];
        for (i, b) in d.iter().enumerate() {
            buf[2 * i] = HEX[(b >> 4) as usize];
            buf[2 * i + 1] = HEX[(b & 15) as usize];
        }
        out.extend_from_slice(&buf);
    }
}

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacKey(redacted)")
    }
}

impl PartialEq for HmacKey {
    fn eq(&self, o: &HmacKey) -> bool {
        self.id == o.id
    }
}

/// What a rule does to its column's values.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Exclude,
    Null,
    Hash(Box<HmacKey>),
    /// Keep the last n characters; each other one becomes '*'.
    Mask(usize),
    /// Keep the first n characters.
    TruncChars(usize),
    /// Keep at most n bytes (a utf8 value is cut at a character boundary).
    TruncBytes(usize),
}

impl Action {
    fn name(&self) -> &'static str {
        match self {
            Action::Exclude => "exclude",
            Action::Null => "null",
            Action::Hash(_) => "hash",
            Action::Mask(_) => "mask",
            Action::TruncChars(_) => "truncate_chars",
            Action::TruncBytes(_) => "truncate_bytes",
        }
    }

    /// Whether the action rewrites values as text (and so makes a JSON
    /// column utf8).
    pub fn is_text(&self) -> bool {
        matches!(
            self,
            Action::Hash(_) | Action::Mask(_) | Action::TruncChars(_) | Action::TruncBytes(_)
        )
    }
}

/// One stream's policies. The default has none.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policies {
    /// Only these source columns are kept (when set).
    pub include: Option<Vec<String>>,
    /// Source column → new name.
    pub renames: Vec<(String, String)>,
    /// Per source column, at most one action.
    pub actions: Vec<(String, Action)>,
    pub filter: Option<Cond>,
    /// The stream is merged by key: an insert or update failing the
    /// filter becomes a delete of its key (its other columns null).
    pub merge: bool,
    /// The stream's key columns (source names).
    pub key: Vec<String>,
}

impl Policies {
    pub fn is_empty(&self) -> bool {
        self.include.is_none()
            && self.renames.is_empty()
            && self.actions.is_empty()
            && self.filter.is_none()
    }

    /// The name a source column is named from: its new name when renamed.
    pub fn naming_key<'a>(&'a self, src: &'a str) -> &'a str {
        self.renames
            .iter()
            .find(|(f, _)| f == src)
            .map_or(src, |(_, t)| t.as_str())
    }

    /// Whether `src` is a column of its own with the name a rename gives
    /// another: it is left out (JSON streams; declared ones refuse this).
    pub fn shadowed(&self, src: &str) -> bool {
        self.renames.iter().any(|(f, t)| t == src && f != src)
            && !self.renames.iter().any(|(f, _)| f == src)
    }

    /// Whether the column is left out of the output.
    pub fn dropped(&self, src: &str) -> bool {
        matches!(self.action(src), Some(Action::Exclude))
            || self
                .include
                .as_ref()
                .is_some_and(|inc| !inc.iter().any(|c| c == src))
            || self.shadowed(src)
    }

    /// Whether the push need not build the column at all: it is left out
    /// and the filter doesn't read it.
    pub fn skips(&self, src: &str) -> bool {
        self.dropped(src) && !self.filter.as_ref().is_some_and(|f| f.reads(src))
    }

    pub fn action(&self, src: &str) -> Option<&Action> {
        self.actions.iter().find(|(c, _)| c == src).map(|(_, a)| a)
    }

    /// Whether a JSON column must be utf8 for its policy.
    pub fn wants_text(&self, src: &str) -> bool {
        self.action(src).is_some_and(Action::is_text)
    }

    /// Parses `{"rules":[...],"filter":cond,"merge":B,"key":[S]}`.
    pub fn from_json(v: &Value) -> Result<Policies, String> {
        let m = v.as_object().ok_or("policies are not an object")?;
        let mut p = Policies::default();
        for (k, v) in m {
            match k.as_str() {
                "rules" => {
                    for r in v.as_array().ok_or("rules is not a list")? {
                        p.rule(r)?;
                    }
                }
                "filter" => {
                    if !v.is_null() {
                        p.filter = Some(cond(v, 0)?);
                    }
                }
                "merge" => p.merge = v.as_bool().ok_or("merge is not a bool")?,
                "key" => p.key = strings(v).ok_or("key is not a list of names")?,
                other => return Err(format!("unknown key {other:?}")),
            }
        }
        p.check()?;
        Ok(p)
    }

    fn rule(&mut self, r: &Value) -> Result<(), String> {
        let m = r.as_object().ok_or("a rule is not an object")?;
        keys::only(m, RULE_KEYS, &keys::label(m, "kind", "rule", "a rule"))?;
        let kind = m
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("a rule has no kind")?;
        let col = || {
            r.get("column")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .ok_or_else(|| format!("a {kind} rule names no column"))
        };
        let n = || {
            r.get("n")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| format!("a {kind} rule has no count n"))
        };
        let act = match kind {
            "include" => {
                let cols = r
                    .get("columns")
                    .and_then(strings)
                    .ok_or("an include rule has no columns")?;
                self.include.get_or_insert_with(Vec::new).extend(cols);
                return Ok(());
            }
            "rename" => {
                let to = r
                    .get("to")
                    .and_then(Value::as_str)
                    .ok_or("a rename rule has no new name")?;
                self.renames.push((col()?, to.to_string()));
                return Ok(());
            }
            "exclude" => Action::Exclude,
            "null" => Action::Null,
            "hash" => {
                let key = r
                    .get("key")
                    .and_then(Value::as_str)
                    .and_then(unhex)
                    .filter(|k| !k.is_empty())
                    .ok_or("a hash rule has no key (hex, at least one byte)")?;
                Action::Hash(Box::new(HmacKey::new(&key)))
            }
            "mask" => Action::Mask(n()?),
            "truncate_chars" => Action::TruncChars(n()?),
            "truncate_bytes" => Action::TruncBytes(n()?),
            other => return Err(format!("unknown rule kind {other:?}")),
        };
        let c = col()?;
        if let Some(a) = self.action(&c) {
            return Err(format!(
                "column {c:?} has two rules ({} and {}): give each column at most one of exclude, null, hash, mask, truncate",
                a.name(),
                act.name()
            ));
        }
        self.actions.push((c, act));
        Ok(())
    }

    /// Checks what needs no schema: names, keys of merged streams.
    fn check(&self) -> Result<(), String> {
        for (i, (f, t)) in self.renames.iter().enumerate() {
            if t.is_empty() || t.contains('\0') || meta::is_reserved(t) {
                return Err(format!(
                    "rename of {f:?}: the new name {t:?} is empty, holds a NUL byte or uses the reserved prefix \"_openetl_\""
                ));
            }
            if self.renames[..i].iter().any(|(f2, _)| f2 == f) {
                return Err(format!("column {f:?} is renamed twice"));
            }
            if let Some((f2, _)) = self.renames[..i].iter().find(|(_, t2)| t2 == t) {
                return Err(format!(
                    "columns {f2:?} and {f:?} are both renamed to {t:?}"
                ));
            }
        }
        if self.merge {
            for k in &self.key {
                if let Some(
                    a @ (Action::Exclude
                    | Action::Null
                    | Action::Mask(_)
                    | Action::TruncChars(_)
                    | Action::TruncBytes(_)),
                ) = self.action(k)
                {
                    return Err(format!(
                        "key column {k:?}: {} would break merging by key (rows lose their key, or two keys become one); hash it instead, or write the stream in append mode",
                        a.name()
                    ));
                }
                if let Some(inc) = &self.include
                    && !inc.contains(k)
                {
                    return Err(format!(
                        "key column {k:?} is not included: a merged stream needs its key"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the policies against a declared schema (name, Arrow type,
    /// in order): every column named exists and its policy takes its type.
    pub fn check_declared(&self, cols: &[(&str, DataType)]) -> Result<(), String> {
        let ty = |c: &str| cols.iter().find(|(n, _)| *n == c).map(|(_, t)| t);
        let missing = |what: &str, c: &str| -> Result<&DataType, String> {
            ty(c).ok_or_else(|| format!("{what}: the stream has no column {c:?}"))
        };
        for c in self.include.iter().flatten() {
            missing("include", c)?;
        }
        for (f, t) in &self.renames {
            missing("rename", f)?;
            if ty(t).is_some() && self.naming_key(t) == t {
                return Err(format!(
                    "rename of {f:?} to {t:?}: the stream has a column {t:?} already"
                ));
            }
        }
        for (c, a) in &self.actions {
            let dt = missing(a.name(), c)?;
            let ok = match a {
                Action::Exclude | Action::Null => true,
                Action::Hash(_) => hashable(dt),
                Action::Mask(_) | Action::TruncChars(_) => *dt == DataType::Utf8,
                Action::TruncBytes(_) => matches!(dt, DataType::Utf8 | DataType::Binary),
            };
            if !ok {
                return Err(format!(
                    "{} of column {c:?}: its type {dt} can't take it (hash takes text, binary and integers; mask and truncate_chars text; truncate_bytes text and binary)",
                    a.name()
                ));
            }
        }
        if let Some(f) = &self.filter {
            check_cond(f, &ty)?;
        }
        Ok(())
    }
}

impl Cond {
    /// Whether the condition reads column `c`.
    pub fn reads(&self, c: &str) -> bool {
        match self {
            Cond::Cmp(n, _, _) | Cond::IsNull(n) | Cond::NotNull(n) | Cond::In(n, _) => n == c,
            Cond::And(cs) | Cond::Or(cs) => cs.iter().any(|x| x.reads(c)),
            Cond::Not(x) => x.reads(c),
        }
    }
}

fn check_cond<'a>(c: &Cond, ty: &impl Fn(&str) -> Option<&'a DataType>) -> Result<(), String> {
    let col = |c: &str| ty(c).ok_or_else(|| format!("filter: the stream has no column {c:?}"));
    match c {
        Cond::IsNull(c) | Cond::NotNull(c) => col(c).map(|_| ()),
        Cond::Cmp(c, _, l) => lit_fits(c, col(c)?, l),
        Cond::In(c, ls) => {
            let dt = col(c)?;
            ls.iter().try_for_each(|l| lit_fits(c, dt, l))
        }
        Cond::And(cs) | Cond::Or(cs) => cs.iter().try_for_each(|c| check_cond(c, ty)),
        Cond::Not(c) => check_cond(c, ty),
    }
}

fn lit_fits(c: &str, dt: &DataType, l: &Lit) -> Result<(), String> {
    let num = dt.is_integer() || dt.is_floating() || matches!(dt, DataType::Decimal128(_, _));
    let ok = match l {
        Lit::Int(_) | Lit::Float(_) => num,
        Lit::Str(_) => *dt == DataType::Utf8,
        Lit::Bool(_) => *dt == DataType::Boolean,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "filter: column {c:?} of type {dt} can't be compared with a {} literal",
            match l {
                Lit::Int(_) => "integer",
                Lit::Float(_) => "float",
                Lit::Str(_) => "string",
                Lit::Bool(_) => "bool",
            }
        ))
    }
}

fn hashable(dt: &DataType) -> bool {
    dt.is_integer()
        || matches!(
            dt,
            DataType::Utf8 | DataType::Binary | DataType::FixedSizeBinary(_)
        )
}

fn strings(v: &Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

const MAX_DEPTH: usize = 64;

/// The keys of a rule, whatever its kind (each kind reads its own).
const RULE_KEYS: &[&str] = &["kind", "column", "columns", "to", "n", "key"];

/// The keys of a filter condition, whatever its op.
const COND_KEYS: &[&str] = &["op", "column", "value", "values", "args"];

fn cond(v: &Value, depth: usize) -> Result<Cond, String> {
    if depth > MAX_DEPTH {
        return Err(format!("filter nests deeper than {MAX_DEPTH}"));
    }
    let m = v
        .as_object()
        .ok_or("filter: a condition is not an object")?;
    keys::only(
        m,
        COND_KEYS,
        &keys::label(m, "op", "filter: op", "filter: a condition"),
    )?;
    let op = m
        .get("op")
        .and_then(Value::as_str)
        .ok_or("a filter condition has no op")?;
    let col = || {
        v.get("column")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("filter: {op} names no column"))
    };
    let args = || -> Result<Vec<Cond>, String> {
        v.get("args")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("filter: {op} has no args"))?
            .iter()
            .map(|a| cond(a, depth + 1))
            .collect()
    };
    let cmp = |o| -> Result<Cond, String> {
        Ok(Cond::Cmp(
            col()?,
            o,
            lit(v.get("value").ok_or("filter: a comparison has no value")?)?,
        ))
    };
    Ok(match op {
        "eq" => cmp(CmpOp::Eq)?,
        "ne" => cmp(CmpOp::Ne)?,
        "lt" => cmp(CmpOp::Lt)?,
        "le" => cmp(CmpOp::Le)?,
        "gt" => cmp(CmpOp::Gt)?,
        "ge" => cmp(CmpOp::Ge)?,
        "is_null" => Cond::IsNull(col()?),
        "not_null" => Cond::NotNull(col()?),
        "in" => Cond::In(
            col()?,
            v.get("values")
                .and_then(Value::as_array)
                .ok_or("filter: in has no values")?
                .iter()
                .map(lit)
                .collect::<Result<_, _>>()?,
        ),
        "and" => Cond::And(args()?),
        "or" => Cond::Or(args()?),
        "not" => {
            let mut a = args()?;
            if a.len() != 1 {
                return Err("filter: not takes one condition".into());
            }
            Cond::Not(Box::new(a.remove(0)))
        }
        other => return Err(format!("filter: unknown op {other:?}")),
    })
}

fn lit(v: &Value) -> Result<Lit, String> {
    let m = v.as_object().filter(|m| m.len() == 1);
    let (k, x) = m
        .and_then(|m| m.iter().next())
        .ok_or("filter: a literal is not {\"int\"|\"float\"|\"str\"|\"bool\": value}")?;
    match k.as_str() {
        "int" => x.as_i64().map(Lit::Int),
        "float" => x.as_f64().map(Lit::Float),
        "str" => x.as_str().map(|s| Lit::Str(s.to_string())),
        "bool" => x.as_bool().map(Lit::Bool),
        _ => None,
    }
    .ok_or_else(|| format!("filter: bad literal {v}"))
}

/// What [`apply`] did to the rows.
pub struct Applied {
    /// Rows the filter dropped.
    pub dropped: usize,
    /// Rows the filter set aside (see [`decide`]), to be quarantined.
    pub set_aside: Vec<crate::quarantine::Quarantined>,
    /// Per kept row, whether it became a delete; empty when none did.
    pub to_delete: Vec<bool>,
    /// What the rows' IDs hash, when not the raw key or payload (see
    /// [`crate::policy_id`]).
    pub id_from: Option<crate::policy_id::IdFrom>,
}

/// Applies `p` to one push's output columns: `srcs` are the columns'
/// source names, `fields` and `cols` the columns (destination names);
/// `ops` is each row's op code.
/// Dropped rows are removed from `out_rows` and `lane_offsets` too.
/// `pre_dropped`: the caller has applied the filter already (see
/// [`decide`]), dropping that many rows; the columns have the kept rows.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    p: &Policies,
    srcs: &mut Vec<String>,
    fields: &mut Vec<Field>,
    cols: &mut Vec<ArrayRef>,
    ops: &[u8],
    out_rows: &mut Vec<u32>,
    lane_offsets: &mut [usize],
    scratch: &mut Vec<u8>,
    pre_dropped: Option<usize>,
) -> Result<Applied, Error> {
    let n = ops.len();
    let mut applied = Applied {
        dropped: 0,
        set_aside: Vec::new(),
        to_delete: Vec::new(),
        id_from: None,
    };
    let mut any_delete = false;
    match pre_dropped {
        Some(d) => applied.dropped = d,
        None => {
            if p.filter.is_some() {
                let col = |name: &str| srcs.iter().position(|s| s == name).map(|i| &cols[i]);
                let d = decide(p, n, &col, ops, scratch);
                applied.dropped = d.dropped;
                any_delete = d.any_delete;
                if d.set_aside > 0 {
                    let c = d.absent.unwrap_or_default();
                    applied.set_aside = scratch
                        .iter()
                        .zip(out_rows.iter())
                        .filter(|(m, _)| **m == SET_ASIDE)
                        .map(|(_, &row)| crate::quarantine::Quarantined {
                            row,
                            reason: crate::quarantine::Reason::FilterColumn,
                            detail: format!(
                                "the merge filter names column {c:?}, which the stream has never had: \
                                 the row is set aside instead of becoming a delete of its key"
                            ),
                        })
                        .collect();
                }
            }
        }
    }
    // The columns left out go first: nothing more is done to them.
    if srcs.iter().any(|s| p.dropped(s)) {
        let keep: Vec<bool> = srcs.iter().map(|s| !p.dropped(s)).collect();
        let mut i = 0;
        fields.retain(|_| (keep[i], i += 1).0);
        let mut i = 0;
        cols.retain(|_| (keep[i], i += 1).0);
        let mut i = 0;
        srcs.retain(|_| (keep[i], i += 1).0);
    }
    if (applied.dropped > 0 || !applied.set_aside.is_empty()) && pre_dropped.is_none() {
        // Lane boundaries over the kept rows: the kept rows before each
        // old boundary.
        let (mut kept, mut j) = (0, 0);
        for off in lane_offsets.iter_mut() {
            while j < *off {
                if !gone(scratch[j]) {
                    kept += 1;
                }
                j += 1;
            }
            *off = kept;
        }
        let mut i = 0;
        out_rows.retain(|_| (!gone(scratch[i]), i += 1).0);
        let pred: arrow_array::BooleanArray = scratch.iter().map(|d| Some(!gone(*d))).collect();
        let f = arrow_select::filter::FilterBuilder::new(&pred)
            .optimize()
            .build();
        for c in cols.iter_mut() {
            *c = if *c.data_type() == DataType::Null {
                Arc::new(arrow_array::NullArray::new(kept))
            } else {
                f.filter(c.as_ref())?
            };
        }
    }
    if any_delete {
        applied.to_delete = scratch
            .iter()
            .filter(|d| !gone(**d))
            .map(|d| *d == TO_DELETE)
            .collect();
        let valid = NullBuffer::new(BooleanBuffer::from_iter(
            applied.to_delete.iter().map(|d| !d),
        ));
        for (c, s) in cols.iter_mut().zip(srcs.iter()) {
            if p.key.contains(s) || *c.data_type() == DataType::Null {
                continue;
            }
            let nulls = NullBuffer::union(c.nulls(), Some(&valid));
            let d = c.to_data().into_builder().nulls(nulls).build()?;
            *c = make_array(d);
        }
    }
    // Value rules.
    for (i, s) in srcs.iter().enumerate() {
        if let Some(a) = p.action(s) {
            cols[i] = rewrite(a, &cols[i], s)?;
            if a.is_text() {
                let f = &fields[i];
                fields[i] = Field::new(f.name(), cols[i].data_type().clone(), true);
            }
        }
    }
    let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    applied.id_from = p.id_from(&names, cols);
    Ok(applied)
}

/// The column `a` with action `act` applied to its values.
fn rewrite(act: &Action, a: &ArrayRef, col: &str) -> Result<ArrayRef, Error> {
    let n = a.len();
    if let Action::Null = act {
        return Ok(arrow_array::new_null_array(a.data_type(), n));
    }
    let mut data: Vec<u8> = Vec::with_capacity(match act {
        Action::Hash(_) => 64 * n,
        _ => a.to_data().buffers().last().map_or(0, |b| b.len()).max(n),
    });
    let mut offs: Vec<i32> = Vec::with_capacity(n + 1);
    offs.push(0);
    let mut num = String::new();
    let nulls = a.logical_nulls();
    let push_off = |data: &Vec<u8>, offs: &mut Vec<i32>| -> Result<(), Error> {
        offs.push(
            i32::try_from(data.len())
                .map_err(|_| Error::internal("a policy's output column is over 2 GiB"))?,
        );
        Ok(())
    };
    // Each value's bytes, as the action sees them.
    let mut each = |f: &mut dyn FnMut(&[u8], &mut Vec<u8>)| -> Result<(), Error> {
        macro_rules! ints {
            ($t:ty) => {{
                let p = a.as_primitive::<$t>();
                for i in 0..n {
                    if !p.is_null(i) {
                        use std::fmt::Write;
                        num.clear();
                        let _ = write!(num, "{}", p.value(i));
                        f(num.as_bytes(), &mut data);
                    }
                    push_off(&data, &mut offs)?;
                }
            }};
        }
        match a.data_type() {
            DataType::Utf8 => {
                let s = a.as_string::<i32>();
                for i in 0..n {
                    if !s.is_null(i) {
                        f(s.value(i).as_bytes(), &mut data);
                    }
                    push_off(&data, &mut offs)?;
                }
            }
            DataType::Binary => {
                let s = a.as_binary::<i32>();
                for i in 0..n {
                    if !s.is_null(i) {
                        f(s.value(i), &mut data);
                    }
                    push_off(&data, &mut offs)?;
                }
            }
            DataType::FixedSizeBinary(_) => {
                let s = a.as_fixed_size_binary();
                for i in 0..n {
                    if !s.is_null(i) {
                        f(s.value(i), &mut data);
                    }
                    push_off(&data, &mut offs)?;
                }
            }
            DataType::Int8 => ints!(Int8Type),
            DataType::Int16 => ints!(Int16Type),
            DataType::Int32 => ints!(Int32Type),
            DataType::Int64 => ints!(Int64Type),
            DataType::UInt8 => ints!(UInt8Type),
            DataType::UInt16 => ints!(UInt16Type),
            DataType::UInt32 => ints!(UInt32Type),
            DataType::UInt64 => ints!(UInt64Type),
            DataType::Null => {
                for _ in 0..n {
                    push_off(&data, &mut offs)?;
                }
            }
            dt => {
                return Err(Error::internal(format!(
                    "{} of column {col:?}: type {dt} can't take it",
                    act.name()
                )));
            }
        }
        Ok(())
    };
    let binary_out = matches!(act, Action::TruncBytes(_)) && *a.data_type() == DataType::Binary;
    match act {
        Action::Hash(k) => each(&mut |v, out| k.hex(v, out))?,
        // Text values are valid UTF-8 (utf8 arrays, or an integer's
        // digits): a character starts at every byte that is not a
        // continuation byte.
        Action::Mask(keep) => each(&mut |v, out| {
            let (masked, at) = if v.is_ascii() {
                let m = v.len().saturating_sub(*keep);
                (m, m)
            } else {
                let chars = v.iter().filter(|&&b| !is_cont(b)).count();
                let m = chars.saturating_sub(*keep);
                (m, char_start(v, m))
            };
            out.resize(out.len() + masked, b'*');
            out.extend_from_slice(&v[at..]);
        })?,
        Action::TruncChars(keep) => each(&mut |v, out| {
            let end = if v.is_ascii() {
                v.len().min(*keep)
            } else {
                char_start(v, *keep)
            };
            out.extend_from_slice(&v[..end]);
        })?,
        Action::TruncBytes(keep) => each(&mut |v, out| {
            let mut end = v.len().min(*keep);
            if !binary_out {
                while end > 0 && end < v.len() && is_cont(v[end]) {
                    end -= 1;
                }
            }
            out.extend_from_slice(&v[..end]);
        })?,
        Action::Exclude | Action::Null => unreachable!("handled above"),
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offs));
    let nulls = nulls.filter(|n| n.null_count() > 0);
    if binary_out {
        return Ok(Arc::new(BinaryArray::new(
            offsets,
            Buffer::from_vec(data),
            nulls,
        )));
    }
    // SAFETY: every value is hex digits, '*'s and a suffix of a UTF-8
    // value from a character boundary, or a UTF-8 value's prefix up to
    // one; the offsets are monotonic and end at the data's length.
    Ok(Arc::new(unsafe {
        StringArray::new_unchecked(offsets, Buffer::from_vec(data), nulls)
    }))
}

#[inline(always)]
fn is_cont(b: u8) -> bool {
    (b & 0xC0) == 0x80
}

/// The byte offset of character `n` of UTF-8 `v` (its length when it has
/// fewer).
#[inline]
fn char_start(v: &[u8], n: usize) -> usize {
    let mut seen = 0;
    for (i, &b) in v.iter().enumerate() {
        if !is_cont(b) {
            if seen == n {
                return i;
            }
            seen += 1;
        }
    }
    v.len()
}

/// The op column `op` with the rows of `to_delete` made deletes.
pub fn deletes(op: &ArrayRef, to_delete: &[bool]) -> ArrayRef {
    let s = op.as_string::<i32>();
    let out: StringArray = (0..s.len())
        .map(|i| {
            Some(if to_delete[i] {
                meta::op_name(meta::OP_DELETE).unwrap_or("delete")
            } else {
                s.value(i)
            })
        })
        .collect();
    Arc::new(out)
}
