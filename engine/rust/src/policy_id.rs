//! The record ID of a stream whose policies remove or alter a value the
//! ID would otherwise hash.
//!
//! `_openetl_id` normally hashes the raw key (keyed streams) or the raw
//! payload (keyless ones) with the seq, with an unkeyed hash: anyone who
//! reads the table could then confirm a guess at a value a policy hid by
//! hashing the guess. So the ID must be a function only of what the
//! destination receives:
//!
//! * a record with a key, no key column under a rule that changes
//!   values: the raw key, as without policies ([`Part::Raw`]);
//! * key columns hashed (and no other key column changed): HMAC-SHA-256
//!   of the raw key under the first hashed key column's key, so without
//!   that key a guess can't be confirmed ([`Part::Hmac`]);
//! * any other key change (an append stream's key masked, truncated,
//!   nulled or left out), and every record without a key on a stream
//!   with a column rule: the row as delivered ([`Part::Row`]), its
//!   columns after every policy.
//!
//! Each is deterministic (policies are), so replays get the same IDs.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_buffer::ToByteSlice;
use arrow_schema::DataType;

use crate::policy::{Action, HmacKey, Policies};

/// What a record's `_openetl_id` hashes besides the stream and seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The raw key or payload, as without policies.
    Raw,
    /// The raw key's HMAC under the policies' first hashed key column's
    /// key.
    Hmac,
    /// The row as delivered.
    Row,
}

/// What a push's IDs hash, when some are not the raw key or payload.
/// Which applies is decided per record, by whether it has a key (as
/// without policies), so a record's ID doesn't depend on its batch.
pub struct IdFrom {
    /// Records with a key.
    pub keyed: Part,
    /// Records without one.
    pub keyless: Part,
    pub hmac: Option<Box<HmacKey>>,
    /// The delivered row: (output name, column), sorted by name; empty
    /// unless a part is [`Part::Row`].
    pub row: Vec<(String, ArrayRef)>,
}

impl Policies {
    /// Whether a column rule changes or removes `src`'s values (a rename
    /// doesn't).
    fn changes(&self, src: &str) -> bool {
        self.action(src).is_some()
            || self
                .include
                .as_ref()
                .is_some_and(|inc| !inc.iter().any(|c| c == src))
    }

    /// How the IDs of records with a key, and of those without, are
    /// derived; fixed by the configuration. With the first, the hash key
    /// of [`Part::Hmac`].
    pub fn id_parts(&self) -> (Part, Part, Option<&HmacKey>) {
        let rules = self.include.is_some() || !self.actions.is_empty() || !self.renames.is_empty();
        let keyless = if rules { Part::Row } else { Part::Raw };
        let mut hmac = None;
        for k in &self.key {
            if !self.changes(k) {
                continue;
            }
            match self.action(k) {
                Some(Action::Hash(h)) => {
                    hmac.get_or_insert(&**h);
                }
                _ => return (Part::Row, keyless, None),
            }
        }
        match hmac {
            Some(h) => (Part::Hmac, keyless, Some(h)),
            None => (Part::Raw, keyless, None),
        }
    }

    /// What the IDs of a push's output hash, given its columns after the
    /// policies (`fields`' names, `cols`); `None`: the raw key or
    /// payload, as without policies.
    pub fn id_from(&self, names: &[&str], cols: &[ArrayRef]) -> Option<IdFrom> {
        let (keyed, keyless, hmac) = self.id_parts();
        if keyed == Part::Raw && keyless == Part::Raw {
            return None;
        }
        let mut row: Vec<(String, ArrayRef)> = Vec::new();
        if keyed == Part::Row || keyless == Part::Row {
            row = names
                .iter()
                .zip(cols)
                .filter(|(_, c)| *c.data_type() != DataType::Null)
                .map(|(n, c)| (n.to_string(), Arc::clone(c)))
                .collect();
            row.sort_by(|a, b| a.0.cmp(&b.0));
        }
        Some(IdFrom {
            keyed,
            keyless,
            hmac: hmac.map(|h| Box::new(h.clone())),
            row,
        })
    }
}

/// Appends row `i` of the delivered columns to `out`: per non-null value,
/// `u32le(len(name)) ‖ name ‖ value`, so a missing column and a null
/// one encode alike (a JSON stream's columns differ between batches).
pub fn encode_row(cols: &[(String, ArrayRef)], i: usize, out: &mut Vec<u8>) {
    for (name, c) in cols {
        if c.is_null(i) {
            continue;
        }
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        value(c.as_ref(), i, out);
    }
}

/// Appends one non-null value: a type class tag, then its bytes,
/// length-prefixed where variable.
fn value(a: &dyn Array, i: usize, out: &mut Vec<u8>) {
    let var = |tag: u8, b: &[u8], out: &mut Vec<u8>| {
        out.push(tag);
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    };
    match a.data_type() {
        DataType::Utf8 => var(1, a.as_string::<i32>().value(i).as_bytes(), out),
        DataType::LargeUtf8 => var(1, a.as_string::<i64>().value(i).as_bytes(), out),
        DataType::Binary => var(2, a.as_binary::<i32>().value(i), out),
        DataType::LargeBinary => var(2, a.as_binary::<i64>().value(i), out),
        DataType::FixedSizeBinary(_) => var(2, a.as_fixed_size_binary().value(i), out),
        DataType::Boolean => {
            out.push(3);
            out.push(a.as_boolean().value(i) as u8);
        }
        DataType::Struct(fs) => {
            let s = a.as_struct();
            out.push(5);
            for (f, c) in fs.iter().zip(s.columns()) {
                if c.is_null(i) {
                    continue;
                }
                out.extend_from_slice(&(f.name().len() as u32).to_le_bytes());
                out.extend_from_slice(f.name().as_bytes());
                value(c.as_ref(), i, out);
            }
            out.push(0xff);
        }
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let (s, e) = (
                l.value_offsets()[i] as usize,
                l.value_offsets()[i + 1] as usize,
            );
            list(l.values().as_ref(), s, e, out);
        }
        DataType::LargeList(_) => {
            let l = a.as_list::<i64>();
            let (s, e) = (
                l.value_offsets()[i] as usize,
                l.value_offsets()[i + 1] as usize,
            );
            list(l.values().as_ref(), s, e, out);
        }
        _ => {
            // Integers, floats, decimals, dates, times, timestamps: the
            // value's bytes; no other type reaches the output.
            arrow_array::downcast_primitive_array!(
                a => {
                    let v = a.value(i);
                    var(4, std::slice::from_ref(&v).to_byte_slice(), out);
                }
                _ => out.push(0)
            )
        }
    }
}

fn list(v: &dyn Array, s: usize, e: usize, out: &mut Vec<u8>) {
    out.push(6);
    out.extend_from_slice(&((e - s) as u32).to_le_bytes());
    for j in s..e {
        if v.is_null(j) {
            out.push(0xfe);
        } else {
            value(v, j, out);
        }
    }
}
