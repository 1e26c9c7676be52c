//! The input batch: a struct array `op uint8, seq int64, key binary,
//! payload binary` with one row per source record, viewed without copying.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, StructArray, UInt8Array};
use arrow_schema::{DataType, Field, Fields};

use crate::error::Error;

/// The input struct type. The Go side exports exactly this; the C surface
/// imports with it when no schema is passed.
pub fn data_type() -> DataType {
    DataType::Struct(fields())
}

fn fields() -> Fields {
    Fields::from(vec![
        Field::new("op", DataType::UInt8, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("key", DataType::Binary, true),
        Field::new("payload", DataType::Binary, true),
    ])
}

/// A borrowed view of an input batch. A null key or payload reads as empty.
#[derive(Clone, Copy)]
pub struct RawRows<'a> {
    ops: &'a [u8],
    seqs: &'a [i64],
    keys: &'a BinaryArray,
    payloads: &'a BinaryArray,
}

impl<'a> RawRows<'a> {
    /// Views `batch`, checking its shape.
    pub fn new(batch: &'a StructArray) -> Result<Self, Error> {
        if batch.num_columns() != 4 {
            return Err(Error::invalid_input(format!(
                "input batch has {} columns, want 4 (op, seq, key, payload)",
                batch.num_columns()
            )));
        }
        if batch.null_count() != 0 {
            return Err(Error::invalid_input("input batch has null rows"));
        }
        let ops = batch
            .column(0)
            .as_any()
            .downcast_ref::<UInt8Array>()
            .ok_or_else(|| Error::invalid_input("input column 0 (op) is not uint8"))?;
        let seqs = batch
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| Error::invalid_input("input column 1 (seq) is not int64"))?;
        let keys = batch
            .column(2)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| Error::invalid_input("input column 2 (key) is not binary"))?;
        let payloads = batch
            .column(3)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .ok_or_else(|| Error::invalid_input("input column 3 (payload) is not binary"))?;
        if ops.null_count() != 0 || seqs.null_count() != 0 {
            return Err(Error::invalid_input("input op and seq must not be null"));
        }
        Ok(RawRows {
            ops: ops.values(),
            seqs: seqs.values(),
            keys,
            payloads,
        })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    #[inline]
    pub fn op(&self, i: usize) -> u8 {
        self.ops[i]
    }

    #[inline]
    pub fn seq(&self, i: usize) -> i64 {
        self.seqs[i]
    }

    #[inline]
    pub fn key(&self, i: usize) -> &'a [u8] {
        if self.keys.is_null(i) {
            &[]
        } else {
            self.keys.value(i)
        }
    }

    #[inline]
    pub fn payload(&self, i: usize) -> &'a [u8] {
        if self.payloads.is_null(i) {
            &[]
        } else {
            self.payloads.value(i)
        }
    }

    /// The payload values buffer and row `i`'s start offset in it: cells
    /// refer to payload text by absolute offsets into this buffer.
    #[inline]
    pub fn payload_buffer(&self) -> &'a [u8] {
        self.payloads.values().as_slice()
    }

    #[inline]
    pub fn payload_start(&self, i: usize) -> usize {
        self.payloads.value_offsets()[i] as usize
    }
}

/// Builds an input batch from rows of (op, seq, key, payload): for tests
/// and for Rust callers.
pub fn batch<K: AsRef<[u8]>, P: AsRef<[u8]>>(rows: &[(u8, i64, K, P)]) -> StructArray {
    let ops: UInt8Array = rows.iter().map(|r| r.0).collect();
    let seqs: Int64Array = rows.iter().map(|r| r.1).collect();
    let keys: BinaryArray = rows.iter().map(|r| Some(r.2.as_ref())).collect();
    let payloads: BinaryArray = rows.iter().map(|r| Some(r.3.as_ref())).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(ops),
        Arc::new(seqs),
        Arc::new(keys),
        Arc::new(payloads),
    ];
    StructArray::new(fields(), cols, None)
}
