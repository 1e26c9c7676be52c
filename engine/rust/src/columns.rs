//! Column builders: turn the cells a scan recorded into Arrow arrays of the
//! column's final (widened) type.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array, NullArray, StringArray,
    TimestampMicrosecondArray,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};

use crate::error::Error;
use crate::infer::{ColumnType, Kind};

/// One field of one accepted document, as recorded by the scan.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    /// The column's index in the stream's schema.
    pub col: u32,
    pub kind: Kind,
    /// The text is in the push's arena (an unescaped string) rather than
    /// in the payload buffer.
    pub in_arena: bool,
    /// The value's text: absolute offsets into the batch's payload buffer
    /// or into the arena (see [`crate::json::Value`]).
    pub start: u32,
    pub end: u32,
    /// Int: i64 bits; Float: f64 bits; Bool: 0 or 1.
    pub num: u64,
}

/// An explicit tag (`repr(u8)`): matching it per cell is then one jump,
/// not a decoding of the vectors' niches.
#[repr(u8)]
enum Values {
    Null,
    Dec(Vec<i128>, u8),
    Ts(Vec<i64>),
    Bool(BooleanBufferBuilder),
    Int(Vec<i64>),
    Float(Vec<f64>),
    Utf8 { offsets: Vec<i32>, data: Vec<u8> },
}

/// Builds one column. Cells arrive in output-row order; rows without a
/// cell are null.
pub struct ColumnBuilder {
    len: usize,
    nulls: NullBufferBuilder,
    values: Values,
}

#[cold]
fn mismatch(ty: &str, kind: Kind) -> Error {
    Error::internal(format!("a {kind:?} value reached a {ty} column"))
}

impl ColumnBuilder {
    /// A builder for `rows` rows; `bytes` bounds the text of a utf8 column.
    pub fn new(ty: ColumnType, rows: usize, bytes: usize) -> Self {
        let values = match ty {
            // Nested columns are built from parsed values (nested::build);
            // no cell reaches this builder.
            ColumnType::Null | ColumnType::Nested => Values::Null,
            ColumnType::Timestamp => Values::Ts(Vec::with_capacity(rows)),
            ColumnType::Decimal { scale, .. } => Values::Dec(Vec::with_capacity(rows), scale),
            ColumnType::Bool => Values::Bool(BooleanBufferBuilder::new(rows)),
            ColumnType::Int64 => Values::Int(Vec::with_capacity(rows)),
            ColumnType::Float64 => Values::Float(Vec::with_capacity(rows)),
            ColumnType::Utf8 => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                Values::Utf8 {
                    offsets,
                    data: Vec::with_capacity(bytes),
                }
            }
        };
        ColumnBuilder {
            len: 0,
            nulls: NullBufferBuilder::new(rows),
            values,
        }
    }

    /// Appends nulls up to (not including) `row`.
    #[inline(always)]
    fn pad(&mut self, row: usize) {
        if row > self.len {
            self.pad_nulls(row);
        }
    }

    #[inline(never)]
    fn pad_nulls(&mut self, row: usize) {
        let n = row - self.len;
        self.nulls.append_n_nulls(n);
        match &mut self.values {
            Values::Null => {}
            Values::Bool(b) => b.append_n(n, false),
            Values::Int(v) | Values::Ts(v) => v.resize(v.len() + n, 0),
            Values::Dec(v, _) => v.resize(v.len() + n, 0),
            Values::Float(v) => v.resize(v.len() + n, 0.0),
            Values::Utf8 { offsets, .. } => {
                let last = offsets.last().copied().unwrap_or(0);
                offsets.resize(offsets.len() + n, last);
            }
        }
        self.len = row;
    }

    /// Sets output row `row` from `cell`. `payload` is the batch's payload
    /// buffer and `arena` the push's unescaped strings.
    #[inline]
    pub fn push(
        &mut self,
        row: usize,
        cell: &Cell,
        payload: &[u8],
        arena: &[u8],
    ) -> Result<(), Error> {
        if row < self.len {
            return Err(Error::internal("two cells for one row of a column"));
        }
        self.pad(row);
        if cell.kind == Kind::Null {
            self.pad(row + 1);
            return Ok(());
        }
        match &mut self.values {
            Values::Null => return Err(mismatch("null", cell.kind)),
            Values::Bool(b) => match cell.kind {
                Kind::Bool => b.append(cell.num != 0),
                k => return Err(mismatch("bool", k)),
            },
            Values::Int(v) => match cell.kind {
                Kind::Int => v.push(cell.num as i64),
                k => return Err(mismatch("int64", k)),
            },
            Values::Dec(v, scale) => match cell.kind {
                Kind::Int => v.push(i128::from(cell.num as i64) * 10i128.pow(u32::from(*scale))),
                Kind::Decimal => {
                    let text = payload
                        .get(cell.start as usize..cell.end as usize)
                        .ok_or_else(|| Error::internal("a cell outside its buffer"))?;
                    // The column's shape holds every value that widened it.
                    let d = crate::coerce::decimal(text, 38, *scale as i8, false)
                        .map_err(|r| Error::internal(format!("a decimal cell: {}", r.detail)))?;
                    v.push(d);
                }
                k => return Err(mismatch("decimal", k)),
            },
            Values::Ts(v) => match cell.kind {
                Kind::Timestamp => v.push(cell.num as i64),
                k => return Err(mismatch("timestamp", k)),
            },
            Values::Float(v) => match cell.kind {
                Kind::Int => {
                    let i = cell.num as i64;
                    // The integer -0 is the float -0.0, as a JSON parser
                    // reading it as a float64 gives.
                    if i == 0 && payload.get(cell.start as usize) == Some(&b'-') {
                        v.push(-0.0)
                    } else {
                        v.push(i as f64)
                    }
                }
                Kind::Float => v.push(f64::from_bits(cell.num)),
                k => return Err(mismatch("float64", k)),
            },
            Values::Utf8 { offsets, data } => {
                let src = if cell.in_arena { arena } else { payload };
                let text = src
                    .get(cell.start as usize..cell.end as usize)
                    .ok_or_else(|| Error::internal("a cell outside its buffer"))?;
                data.extend_from_slice(text);
                let end = i32::try_from(data.len())
                    .map_err(|_| Error::internal("a utf8 column over 2 GiB in one batch"))?;
                offsets.push(end);
            }
        }
        self.nulls.append_non_null();
        self.len = row + 1;
        Ok(())
    }

    /// Finishes the column at `rows` rows.
    pub fn finish(mut self, rows: usize) -> Result<ArrayRef, Error> {
        if rows < self.len {
            return Err(Error::internal("a column longer than its batch"));
        }
        self.pad(rows);
        let nulls = self.nulls.finish();
        Ok(match self.values {
            Values::Null => Arc::new(NullArray::new(rows)),
            Values::Bool(mut b) => Arc::new(BooleanArray::new(b.finish(), nulls)),
            Values::Int(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), nulls)),
            Values::Dec(v, scale) => Arc::new(
                Decimal128Array::new(ScalarBuffer::from(v), nulls)
                    .with_precision_and_scale(38, scale as i8)?,
            ),
            Values::Ts(v) => Arc::new(
                TimestampMicrosecondArray::new(ScalarBuffer::from(v), nulls).with_timezone("UTC"),
            ),
            Values::Float(v) => Arc::new(Float64Array::new(ScalarBuffer::from(v), nulls)),
            Values::Utf8 { offsets, data } => {
                let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
                debug_assert!(std::str::from_utf8(&data).is_ok());
                // SAFETY: `data` is the concatenation of spans of documents
                // that json::scan_object accepted, which are valid UTF-8
                // (strings validated, everything else ASCII) and cut at quote
                // bytes or at a value's ASCII first and last byte (char
                // boundaries), and of unescaped strings built from chars;
                // every offset sits on one of those cuts.
                unsafe {
                    Arc::new(StringArray::new_unchecked(
                        offsets,
                        Buffer::from_vec(data),
                        nulls,
                    ))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    fn cell(kind: Kind, start: u32, end: u32, num: u64) -> Cell {
        Cell {
            col: 0,
            kind,
            in_arena: false,
            start,
            end,
            num,
        }
    }

    #[test]
    fn pads_with_nulls() {
        let payload = b"12.5true\"x\"";
        let mut b = ColumnBuilder::new(ColumnType::Utf8, 5, 16);
        b.push(1, &cell(Kind::Float, 0, 4, 0), payload, &[])
            .unwrap();
        b.push(3, &cell(Kind::Bool, 4, 8, 1), payload, &[]).unwrap();
        let a = b.finish(5).unwrap();
        let s = a.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s.null_count(), 3);
        assert_eq!(s.value(1), "12.5");
        assert_eq!(s.value(3), "true");

        let mut b = ColumnBuilder::new(ColumnType::Float64, 3, 0);
        b.push(0, &cell(Kind::Int, 0, 0, (-3i64) as u64), payload, &[])
            .unwrap();
        b.push(2, &cell(Kind::Float, 0, 0, 0.5f64.to_bits()), payload, &[])
            .unwrap();
        let a = b.finish(3).unwrap();
        let f = a.as_any().downcast_ref::<Float64Array>().unwrap();
        assert_eq!(f.value(0), -3.0);
        assert!(f.is_null(1));
        assert_eq!(f.value(2), 0.5);
    }

    #[test]
    fn rejects_mismatches() {
        let mut b = ColumnBuilder::new(ColumnType::Int64, 2, 0);
        assert!(b.push(0, &cell(Kind::Text, 0, 0, 0), b"", &[]).is_err());
        let mut b = ColumnBuilder::new(ColumnType::Int64, 2, 0);
        b.push(1, &cell(Kind::Int, 0, 0, 1), b"", &[]).unwrap();
        assert!(b.push(1, &cell(Kind::Int, 0, 0, 1), b"", &[]).is_err());
    }
}
