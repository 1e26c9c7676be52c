//! Declared rows: the payload layout of a row (written by Go's
//! `source.AppendRow`) and the building of Arrow arrays from coerced values.
//!
//! A row payload is one entry per declared column, in order:
//! `uvarint(0)` null, `uvarint(1)` unchanged (not sent by the source),
//! `uvarint(len + 2) ‖ bytes` a value in the source's text form.

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, DurationMicrosecondBuilder,
    FixedSizeBinaryBuilder, Float32Builder, Float64Builder, Int8Builder, Int16Builder,
    Int32Builder, Int64Builder, IntervalMonthDayNanoBuilder, StringBuilder,
    Time64MicrosecondBuilder, TimestampMicrosecondBuilder, UInt8Builder, UInt16Builder,
    UInt32Builder, UInt64Builder,
};
use arrow_array::types::IntervalMonthDayNano;
use arrow_array::{ArrayRef, ListArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::Field;

use crate::coerce::Val;
use crate::decl::{Decl, Types};
use crate::error::Error;

/// One declared column.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclColumn {
    pub name: String,
    /// The source's type name, as declared.
    pub type_name: String,
    pub decl: Decl,
    pub nullable: bool,
    /// The column is part of the stream's primary key: a value out of
    /// range there quarantines the row (a key can't be held).
    pub key: bool,
}

/// A declared (FormatRow) stream's schema.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclStream {
    pub types: Types,
    pub columns: Vec<DeclColumn>,
}

/// One entry of a row payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Null,
    Unchanged,
    /// The value's bytes: offsets relative to the payload.
    Value(usize, usize),
}

/// Reads the next entry of `p` at `*pos`; `None` at the end, `Err` for a
/// malformed payload.
#[inline]
pub fn next_entry(p: &[u8], pos: &mut usize) -> Result<Option<Entry>, &'static str> {
    if *pos >= p.len() {
        return Ok(None);
    }
    let mut h: u64 = 0;
    let mut shift = 0;
    loop {
        let b = *p.get(*pos).ok_or("truncated entry header")?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err("entry header overflows");
        }
        h |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err("entry header overflows");
        }
    }
    Ok(Some(match h {
        0 => Entry::Null,
        1 => Entry::Unchanged,
        n => {
            let len = usize::try_from(n - 2).map_err(|_| "entry too long")?;
            let end = pos.checked_add(len).ok_or("entry too long")?;
            if end > p.len() {
                return Err("entry runs past the payload");
            }
            let e = Entry::Value(*pos, end);
            *pos = end;
            e
        }
    }))
}

/// Encodes a row (for tests and Rust callers): `None` is null.
pub fn encode(values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        match v {
            None => out.push(0),
            Some(b) => {
                let mut h = b.len() as u64 + 2;
                while h >= 0x80 {
                    out.push((h as u8) | 0x80);
                    h >>= 7;
                }
                out.push(h as u8);
                out.extend_from_slice(b);
            }
        }
    }
    out
}

fn text<'a>(v: &Val, payload: &'a [u8], arena: &'a [u8]) -> Result<&'a [u8], Error> {
    match *v {
        Val::Text {
            arena: a,
            start,
            end,
        } => {
            let src = if a { arena } else { payload };
            src.get(start as usize..end as usize)
                .ok_or_else(|| Error::internal("a value outside its buffer"))
        }
        _ => Err(Error::internal("a non-text value in a text column")),
    }
}

macro_rules! prim {
    ($builder:expr, $vals:expr, $pat:pat => $e:expr) => {{
        let mut b = $builder;
        for v in $vals {
            match *v {
                Val::Null => b.append_null(),
                $pat => b.append_value($e),
                _ => return Err(Error::internal("a value of the wrong kind for its column")),
            }
        }
        Arc::new(b.finish()) as ArrayRef
    }};
}

/// Builds the array of `decl` from `vals` (in output order).
pub fn build<'v, I>(
    decl: &Decl,
    vals: I,
    n: usize,
    payload: &[u8],
    arena: &[u8],
    elems: &[Val],
) -> Result<ArrayRef, Error>
where
    I: Iterator<Item = &'v Val>,
{
    Ok(match decl {
        Decl::Int8 => prim!(Int8Builder::with_capacity(n), vals, Val::I(x) => x as i8),
        Decl::Int16 => prim!(Int16Builder::with_capacity(n), vals, Val::I(x) => x as i16),
        Decl::Int32 => prim!(Int32Builder::with_capacity(n), vals, Val::I(x) => x as i32),
        Decl::Int64 => prim!(Int64Builder::with_capacity(n), vals, Val::I(x) => x),
        Decl::UInt8 => prim!(UInt8Builder::with_capacity(n), vals, Val::U(x) => x as u8),
        Decl::UInt16 => prim!(UInt16Builder::with_capacity(n), vals, Val::U(x) => x as u16),
        Decl::UInt32 => prim!(UInt32Builder::with_capacity(n), vals, Val::U(x) => x as u32),
        Decl::UInt64 => prim!(UInt64Builder::with_capacity(n), vals, Val::U(x) => x),
        Decl::Float32 => prim!(Float32Builder::with_capacity(n), vals, Val::F(x) => x as f32),
        Decl::Float64 => prim!(Float64Builder::with_capacity(n), vals, Val::F(x) => x),
        Decl::Decimal { p, s, .. } => prim!(
            Decimal128Builder::with_capacity(n).with_precision_and_scale(*p, *s)?,
            vals, Val::D(x) => x),
        Decl::Bool => prim!(BooleanBuilder::with_capacity(n), vals, Val::B(x) => x),
        Decl::Date => prim!(Date32Builder::with_capacity(n), vals, Val::I(x) => x as i32),
        Decl::Time => prim!(Time64MicrosecondBuilder::with_capacity(n), vals, Val::I(x) => x),
        Decl::Duration => prim!(DurationMicrosecondBuilder::with_capacity(n), vals, Val::I(x) => x),
        Decl::Timestamp => {
            prim!(TimestampMicrosecondBuilder::with_capacity(n), vals, Val::I(x) => x)
        }
        Decl::TimestampTz => prim!(
            TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC"),
            vals, Val::I(x) => x),
        Decl::Interval => prim!(IntervalMonthDayNanoBuilder::with_capacity(n), vals,
            Val::Iv { months, days, nanos } => IntervalMonthDayNano::new(months, days, nanos)),
        Decl::Uuid => {
            let mut b = FixedSizeBinaryBuilder::with_capacity(n, 16);
            for v in vals {
                match *v {
                    Val::Null => b.append_null(),
                    Val::Uuid(u) => b.append_value(u.to_be_bytes())?,
                    _ => return Err(Error::internal("a non-uuid value in a uuid column")),
                }
            }
            Arc::new(b.finish())
        }
        Decl::NumericText | Decl::Utf8 | Decl::Enum | Decl::Json | Decl::TimeTz => {
            let mut b = StringBuilder::with_capacity(n, 16 * n);
            for v in vals {
                if *v == Val::Null {
                    b.append_null();
                } else {
                    let t = text(v, payload, arena)?;
                    // Coercion validated every text value as UTF-8.
                    let s = std::str::from_utf8(t)
                        .map_err(|_| Error::internal("a utf8 value that is not UTF-8"))?;
                    b.append_value(s);
                }
            }
            Arc::new(b.finish())
        }
        Decl::Binary { .. } => {
            let mut b = BinaryBuilder::with_capacity(n, 16 * n);
            for v in vals {
                if *v == Val::Null {
                    b.append_null();
                } else {
                    b.append_value(text(v, payload, arena)?);
                }
            }
            Arc::new(b.finish())
        }
        Decl::List(elem) => {
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let mut valid = Vec::with_capacity(n);
            let mut child: Vec<Val> = Vec::new();
            for v in vals {
                match *v {
                    Val::Null => valid.push(false),
                    Val::List { start, end } => {
                        valid.push(true);
                        child.extend_from_slice(
                            elems
                                .get(start as usize..end as usize)
                                .ok_or_else(|| Error::internal("list elements out of range"))?,
                        );
                    }
                    _ => return Err(Error::internal("a non-list value in a list column")),
                }
                offsets.push(
                    i32::try_from(child.len())
                        .map_err(|_| Error::internal("a list column over 2^31 elements"))?,
                );
            }
            let values = build(elem, child.iter(), child.len(), payload, arena, elems)?;
            let nulls = NullBuffer::from(valid);
            let nulls = (nulls.null_count() > 0).then_some(nulls);
            Arc::new(ListArray::try_new(
                Arc::new(Field::new("item", elem.data_type(), true)),
                OffsetBuffer::new(offsets.into()),
                values,
                nulls,
            )?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let long = vec![b'x'; 300];
        let p = encode(&[Some(b"12"), None, Some(b""), Some(&long)]);
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some(e) = next_entry(&p, &mut pos).unwrap() {
            got.push(e);
        }
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], Entry::Value(1, 3));
        assert_eq!(got[1], Entry::Null);
        assert_eq!(got[2], Entry::Value(5, 5));
        assert!(matches!(got[3], Entry::Value(s, e) if e - s == 300));
        assert_eq!(next_entry(&[1], &mut 0).unwrap(), Some(Entry::Unchanged));
        assert!(next_entry(&[5, b'a'], &mut 0).is_err());
        assert!(next_entry(&[0x80], &mut 0).is_err());
        assert!(next_entry(&[0xff; 11], &mut 0).is_err());
    }
}
