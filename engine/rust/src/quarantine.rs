//! Rows the engine sets aside, and why.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};

use crate::error::Error;

/// Why a record was quarantined. The strings are the ones the Go side
/// (engine.Reason) and the quarantine files use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Not one JSON object, a malformed row payload, an unknown op code,
    /// or a field the engine refuses.
    Parse,
    /// A declared value that does not parse as its type, or a document
    /// the frozen schema can't take.
    TypeConflict,
    /// A declared value that parses but doesn't fit its type (overflow,
    /// scale, infinity, a zero date).
    OutOfRange,
    /// A keyed stream's record without a key.
    MissingKey,
    /// The payload is over `max_document_bytes`.
    TooLarge,
    /// Nesting deeper than [`crate::json::MAX_DEPTH`].
    TooDeep,
    /// A declared row with a value the source did not send (a Postgres
    /// unchanged TOAST value), which the engine can't fill yet.
    Unchanged,
    /// A merged stream's row that fails a filter naming a column the
    /// stream has never had: set aside, not turned into a delete.
    FilterColumn,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Parse => "parse_error",
            Reason::TypeConflict => "type_conflict",
            Reason::OutOfRange => "out_of_range",
            Reason::MissingKey => "missing_key",
            Reason::TooLarge => "too_large",
            Reason::TooDeep => "too_deep",
            Reason::Unchanged => "unchanged_value",
            Reason::FilterColumn => "filter_column",
        }
    }
}

/// A rejected document: the reason and a detail without row data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    pub reason: Reason,
    pub detail: String,
}

impl Reject {
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Reject {
            reason,
            detail: detail.into(),
        }
    }

    pub fn parse(detail: impl Into<String>) -> Self {
        Self::new(Reason::Parse, detail)
    }
}

/// One quarantined record of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The record's index in the input batch.
    pub row: u32,
    pub reason: Reason,
    pub detail: String,
}

/// The schema of the quarantine batch: `row uint32, reason utf8, detail utf8`.
pub fn schema() -> Schema {
    Schema::new(vec![
        Field::new("row", DataType::UInt32, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("detail", DataType::Utf8, false),
    ])
}

/// The quarantine batch for `rows`, in the order given; `None` when empty.
pub fn batch(rows: &[Quarantined]) -> Result<Option<RecordBatch>, Error> {
    if rows.is_empty() {
        return Ok(None);
    }
    let row: UInt32Array = rows.iter().map(|q| q.row).collect();
    let reason: StringArray = rows.iter().map(|q| Some(q.reason.as_str())).collect();
    let detail: StringArray = rows.iter().map(|q| Some(q.detail.as_str())).collect();
    let cols: Vec<ArrayRef> = vec![Arc::new(row), Arc::new(reason), Arc::new(detail)];
    Ok(Some(RecordBatch::try_new(Arc::new(schema()), cols)?))
}
