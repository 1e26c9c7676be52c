//! Hold-back: columns whose Arrow type the destination can't take are left
//! out of the output, and each of their non-null values comes back as a
//! held record (input row, destination column name, the value's text) for
//! the runner to keep under `_held/`. [`release`] later turns held values
//! back into an Arrow column of the column's type.
//!
//! Types are named by class: `int` (signed integers), `uint`, `float32`,
//! `float64`, `decimal`, `bool`, `utf8`, `binary`, `fixed_size_binary`,
//! `date`, `time`, `duration`, `timestamp` (no zone), `timestamptz`,
//! `interval`, `list`, `struct`, `null`.
//!
//! A held value's text is the source's text form for declared rows, and
//! for documents a string's content or any other value's JSON text.
//!
//! A declared row's cell whose value is outside its column's Arrow type
//! (`out_of_range`: Postgres `time '24:00:00'`, a timestamp past Arrow's
//! microsecond range, infinity, a MySQL zero date) is held on its own: the
//! row lands with a null in that column and the value comes back as a held
//! record with the reason, instead of the whole row being quarantined.

use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use serde_json::Value;

use crate::coerce::{self, Src};
use crate::error::Error;
use crate::infer::ColumnType;
use crate::quarantine::Reject;
use crate::state::StreamSchema;
use crate::{nested, rows};

/// The class name of an Arrow type, as unsupported types are listed.
pub fn type_class(dt: &DataType) -> &'static str {
    match dt {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => "int",
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => "uint",
        DataType::Float16 | DataType::Float32 => "float32",
        DataType::Float64 => "float64",
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "decimal",
        DataType::Boolean => "bool",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "utf8",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "binary",
        DataType::FixedSizeBinary(_) => "fixed_size_binary",
        DataType::Date32 | DataType::Date64 => "date",
        DataType::Time32(_) | DataType::Time64(_) => "time",
        DataType::Duration(_) => "duration",
        DataType::Timestamp(_, None) => "timestamp",
        DataType::Timestamp(_, Some(_)) => "timestamptz",
        DataType::Interval(_) => "interval",
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) => "list",
        DataType::Struct(_) => "struct",
        DataType::Null => "null",
        _ => "other",
    }
}

/// The type classes every name in `list` must be one of.
pub const CLASSES: &[&str] = &[
    "int",
    "uint",
    "float32",
    "float64",
    "decimal",
    "bool",
    "utf8",
    "binary",
    "fixed_size_binary",
    "date",
    "time",
    "duration",
    "timestamp",
    "timestamptz",
    "interval",
    "list",
    "struct",
    "null",
];

/// One held value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The record's index in the input batch.
    pub row: u32,
    /// The destination name of the column.
    pub column: String,
    pub value: Vec<u8>,
    /// Why this one cell was held (`out_of_range`, with a detail without
    /// row data); `None` for a value of a column whose type the
    /// destination can't take.
    pub cell: Option<Reject>,
}

/// The held batch `row uint32, column utf8, value binary, reason utf8,
/// detail utf8` (reason and detail empty but for cells held on their
/// own); `None` if empty.
pub fn batch(held: &[Held]) -> Result<Option<RecordBatch>, Error> {
    if held.is_empty() {
        return Ok(None);
    }
    let row: UInt32Array = held.iter().map(|h| h.row).collect();
    let column: StringArray = held.iter().map(|h| Some(h.column.as_str())).collect();
    let value: BinaryArray = held.iter().map(|h| Some(h.value.as_slice())).collect();
    let reason: StringArray = held
        .iter()
        .map(|h| Some(h.cell.as_ref().map_or("", |c| c.reason.as_str())))
        .collect();
    let detail: StringArray = held
        .iter()
        .map(|h| Some(h.cell.as_ref().map_or("", |c| c.detail.as_str())))
        .collect();
    let schema = Schema::new(vec![
        Field::new("row", DataType::UInt32, false),
        Field::new("column", DataType::Utf8, false),
        Field::new("value", DataType::Binary, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("detail", DataType::Utf8, false),
    ]);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(row),
        Arc::new(column),
        Arc::new(value),
        Arc::new(reason),
        Arc::new(detail),
    ];
    Ok(Some(RecordBatch::try_new(Arc::new(schema), cols)?))
}

/// Turns held values of one column (by its destination name) of `stream`
/// back into an array of the column's current type, in order (for a
/// nested column, without the parts that have only seen empty objects,
/// see [`nested::JType::writable`]); a value the type can't take is an
/// error, and so is a column that has no type yet.
pub fn release(st: &StreamSchema, column: &str, values: &[&[u8]]) -> Result<ArrayRef, Error> {
    let src = st
        .names
        .columns
        .iter()
        .find(|(_, d)| d == column)
        .map_or(column, |(s, _)| s.as_str());
    let bad = |i: usize| {
        Error::invalid_input(format!(
            "held value {i} of column {column:?} does not fit the column's type"
        ))
    };
    if let Some(d) = &st.declared {
        let col = d
            .columns
            .iter()
            .find(|c| c.name == src)
            .ok_or_else(|| Error::invalid_input(format!("no column {column:?}")))?;
        // Values are coerced from a buffer of their own.
        let buf: Vec<u8> = values.concat();
        let (mut arena, mut elems, mut scratch, mut vals) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut off = 0;
        for (i, v) in values.iter().enumerate() {
            let val = coerce::coerce(
                &col.decl,
                v,
                Src::Payload(off),
                &mut arena,
                &mut elems,
                &mut scratch,
            )
            .map_err(|_| bad(i))?;
            vals.push(val);
            off += v.len();
        }
        return rows::build(&col.decl, vals.iter(), vals.len(), &buf, &arena, &elems);
    }
    let col = st
        .lookup(src)
        .map(|i| &st.columns[i])
        .ok_or_else(|| Error::invalid_input(format!("no column {column:?}")))?;
    // Documents: rebuild each value as JSON and type it like nested values.
    let t = match (col.ty, &col.tree) {
        (ColumnType::Nested, Some(t)) => t
            .writable(&[])
            .ok_or_else(|| Error::invalid_input(format!("column {column:?} has no type yet")))?,
        (ColumnType::Bool, _) => nested::JType::Bool,
        (ColumnType::Int64, _) => nested::JType::Int64,
        (ColumnType::Float64, _) => nested::JType::Float64,
        (ColumnType::Utf8, _) => nested::JType::Utf8,
        (ColumnType::Decimal { scale, .. }, _) => {
            let mut b = arrow_array::builder::Decimal128Builder::with_capacity(values.len())
                .with_precision_and_scale(38, scale as i8)?;
            for (i, v) in values.iter().enumerate() {
                b.append_value(coerce::decimal(v, 38, scale as i8, false).map_err(|_| bad(i))?);
            }
            return Ok(Arc::new(b.finish()));
        }
        (ColumnType::Timestamp, _) => {
            let mut b =
                arrow_array::builder::TimestampMicrosecondBuilder::with_capacity(values.len())
                    .with_timezone("UTC");
            for (i, v) in values.iter().enumerate() {
                b.append_value(coerce::rfc3339_micros(v).ok_or_else(|| bad(i))?);
            }
            return Ok(Arc::new(b.finish()));
        }
        _ => {
            return Err(Error::invalid_input(format!(
                "column {column:?} holds no values"
            )));
        }
    };
    let mut parsed = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        parsed.push(match t {
            nested::JType::Utf8 => {
                Value::String(String::from_utf8(v.to_vec()).map_err(|_| bad(i))?)
            }
            _ => serde_json::from_slice::<Value>(v).map_err(|_| bad(i))?,
        });
    }
    let refs: Vec<Option<&Value>> = parsed.iter().map(Some).collect();
    nested::build(&t, &refs)
}
