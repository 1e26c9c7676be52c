//! Arrow arrays from a [`Tape`]: the tape-side twin of
//! [`crate::nested::build`].

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, ListArray, NullArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::Field;

use super::{NONE, Tag, Tape, cmp_key, key_eq};
use crate::error::Error;
use crate::nested::{JType, fields};

/// Builds the array of type `t` from one tape node per row ([`NONE`] or
/// a JSON null is a null row), as [`crate::nested::build`] does from
/// parsed values. `src` is the buffer the tape's spans point into.
pub fn build(t: &JType, tape: &mut Tape, src: &[u8], rows: &[u32]) -> Result<ArrayRef, Error> {
    let n = rows.len();
    // A row without a node (NONE, or an index this tape never held) is null.
    let tag = |tape: &Tape, i: u32| tape.nodes.get(i as usize).map_or(Tag::Null, |n| n.tag);
    Ok(match t {
        JType::Null => Arc::new(NullArray::new(n)),
        JType::Bool => {
            let mut b = BooleanBuilder::with_capacity(n);
            for &i in rows {
                match tag(tape, i) {
                    Tag::Bool => b.append_value(tape.nodes[i as usize].num != 0),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        JType::Int64 => {
            let mut b = Int64Builder::with_capacity(n);
            for &i in rows {
                match tag(tape, i) {
                    Tag::Int => b.append_value(tape.nodes[i as usize].num as i64),
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        JType::Float64 => {
            let mut b = Float64Builder::with_capacity(n);
            for &i in rows {
                b.append_option(tape.nodes.get(i as usize).and_then(|nd| {
                    match nd.tag {
                        Tag::Float => Some(f64::from_bits(nd.num)),
                        Tag::Int => {
                            let v = nd.num as i64;
                            // `-0` parses to the float -0.0 (serde_json's as_f64).
                            if v == 0 && tape.bytes(src, nd).first() == Some(&b'-') {
                                Some(-0.0)
                            } else {
                                Some(v as f64)
                            }
                        }
                        Tag::Num => std::str::from_utf8(tape.bytes(src, nd))
                            .ok()
                            .and_then(|s| s.parse::<f64>().ok())
                            .filter(|f| f.is_finite()),
                        _ => None,
                    }
                }));
            }
            Arc::new(b.finish())
        }
        JType::Utf8 => {
            let mut b = StringBuilder::with_capacity(n, 16 * n);
            let mut buf = Vec::new();
            for &i in rows {
                match tag(tape, i) {
                    Tag::Null => b.append_null(),
                    t => {
                        buf.clear();
                        let bytes = if t == Tag::Str {
                            tape.bytes(src, &tape.nodes[i as usize])
                        } else {
                            buf.clear();
                            tape.write_json(src, i, &mut buf);
                            &buf[..]
                        };
                        debug_assert!(std::str::from_utf8(bytes).is_ok());
                        // SAFETY: a string's span in a document that
                        // json::scan_object validated is UTF-8 cut at quote
                        // bytes; unescaped strings are built from chars (or
                        // are serde_json Strings); JSON text is those plus
                        // ASCII.
                        b.append_value(unsafe { std::str::from_utf8_unchecked(bytes) });
                    }
                }
            }
            Arc::new(b.finish())
        }
        JType::List(e) => {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let mut child: Vec<u32> = Vec::new();
            let mut valid = Vec::with_capacity(n);
            for &i in rows {
                if tag(tape, i) == Tag::Arr {
                    child.extend(tape.elements(i));
                    valid.push(true);
                } else {
                    valid.push(false);
                }
                offsets.push(
                    i32::try_from(child.len())
                        .map_err(|_| Error::internal("a list column over 2^31 elements"))?,
                );
            }
            let values = build(e, tape, src, &child)?;
            let nulls = NullBuffer::from(valid);
            Arc::new(ListArray::try_new(
                Arc::new(Field::new("item", e.data_type(), true)),
                OffsetBuffer::new(offsets.into()),
                values,
                (nulls.null_count() > 0).then_some(nulls),
            )?)
        }
        JType::Struct(f) => {
            let nf = f.len();
            // Field indices by name, for lookups (the tree is sorted, but a
            // saved state need not be).
            let mut by_name: Vec<usize> = (0..nf).collect();
            by_name.sort_by(|&a, &b| f[a].0.cmp(&f[b].0));
            let mut child = vec![NONE; nf * n];
            // after[x]: the field that followed field x in the last object
            // (after[nf]: the first field). Documents usually list keys in
            // one order, so this guess spares the search.
            let mut after = vec![0usize; nf + 1];
            for (r, &i) in rows.iter().enumerate() {
                if tag(tape, i) != Tag::Obj {
                    continue;
                }
                let mut prev = nf;
                for (k, v) in tape.members(i) {
                    let key = tape.bytes(src, &tape.nodes[k as usize]);
                    let guess = after[prev];
                    let fi = if guess < nf && key_eq(f[guess].0.as_bytes(), key) {
                        Some(guess)
                    } else {
                        by_name
                            .binary_search_by(|&x| cmp_key(f[x].0.as_bytes(), key))
                            .ok()
                            .map(|p| by_name[p])
                    };
                    if let Some(fi) = fi {
                        // A later duplicate key overwrites: the last wins.
                        child[fi * n + r] = v;
                        after[prev] = fi;
                        prev = fi;
                    }
                }
            }
            let mut cols = Vec::with_capacity(nf);
            for (fi, (_, ft)) in f.iter().enumerate() {
                cols.push(build(ft, tape, src, &child[fi * n..(fi + 1) * n])?);
            }
            let nulls = NullBuffer::from_iter(rows.iter().map(|&i| tag(tape, i) != Tag::Null));
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
