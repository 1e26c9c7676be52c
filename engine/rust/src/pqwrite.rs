//! Parquet files from Arrow record batches, for sink/parquet: arrow-rs's
//! `ArrowWriter` encoding into memory. The caller pushes batches and,
//! after each call, takes the bytes the call finished (whole row groups,
//! then the footer) and writes them where the file goes; the writer keeps
//! only the row group in progress. Sans-IO like the rest of the crate.
//!
//! The C surface (`openetl_parquet_*`) is at the end of this file; the
//! header is `engine/include/openetl_engine.h`.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StructArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{DataType, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use serde_json::Value;

use crate::error::{Error, Status};
use crate::ffi;

/// A file's writer options, from the JSON the Go side sends:
/// `{"codec":"zstd"|"snappy"|"lz4_raw"|"uncompressed","level":N,
/// "row_group_rows":N,"dictionary":B,"dictionary_columns":{"name":B},
/// "created_by":S}`. Unknown keys are refused.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub compression: Compression,
    pub row_group_rows: usize,
    /// Dictionary encoding for columns not in `dictionary_columns`.
    pub dictionary: bool,
    /// Top-level columns whose dictionary choice differs from the default.
    pub dictionary_columns: Vec<(String, bool)>,
    pub created_by: String,
}

impl Options {
    pub fn from_json(b: &[u8]) -> Result<Options, Error> {
        let v: Value = serde_json::from_slice(b)
            .map_err(|e| Error::invalid_input(format!("parquet options: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::invalid_input("parquet options: not a JSON object"))?;
        let mut codec = "zstd";
        let mut level: i64 = 0;
        let mut o = Options {
            compression: Compression::UNCOMPRESSED,
            row_group_rows: 131072,
            dictionary: true,
            dictionary_columns: Vec::new(),
            created_by: "openetl".to_string(),
        };
        let bad = |k: &str, want: &str| {
            Error::invalid_input(format!("parquet options: {k:?} must be {want}"))
        };
        for (k, val) in obj {
            match k.as_str() {
                "codec" => codec = val.as_str().ok_or_else(|| bad(k, "a string"))?,
                "level" => level = val.as_i64().ok_or_else(|| bad(k, "an integer"))?,
                "row_group_rows" => {
                    o.row_group_rows = val
                        .as_u64()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| bad(k, "a positive integer"))?
                        as usize
                }
                "dictionary" => o.dictionary = val.as_bool().ok_or_else(|| bad(k, "a boolean"))?,
                "dictionary_columns" => {
                    let m = val.as_object().ok_or_else(|| bad(k, "an object"))?;
                    for (c, on) in m {
                        let on = on
                            .as_bool()
                            .ok_or_else(|| bad(k, "an object of booleans"))?;
                        o.dictionary_columns.push((c.clone(), on));
                    }
                }
                "created_by" => {
                    o.created_by = val.as_str().ok_or_else(|| bad(k, "a string"))?.to_string()
                }
                _ => {
                    return Err(Error::invalid_input(format!(
                        "parquet options: unknown key {k:?}"
                    )));
                }
            }
        }
        o.compression =
            match (codec, level) {
                ("zstd", 0) => Compression::ZSTD(ZstdLevel::default()),
                ("zstd", l) => Compression::ZSTD(ZstdLevel::try_new(l as i32).map_err(|e| {
                    Error::invalid_input(format!("parquet options: zstd level: {e}"))
                })?),
                ("snappy", 0) => Compression::SNAPPY,
                ("lz4_raw", 0) => Compression::LZ4_RAW,
                ("uncompressed", 0) => Compression::UNCOMPRESSED,
                ("snappy" | "lz4_raw" | "uncompressed", l) => {
                    return Err(Error::invalid_input(format!(
                        "parquet options: level {l}: {codec} has no levels"
                    )));
                }
                _ => {
                    return Err(Error::invalid_input(format!(
                        "parquet options: codec {codec:?} is not built into the engine"
                    )));
                }
            };
        Ok(o)
    }

    /// The writer's properties for a file of `schema`, whose metadata
    /// also goes into the footer's key-value metadata, as arrow-go's
    /// writer does (readers that ignore ARROW:schema still see it).
    fn properties(&self, schema: &Schema) -> WriterProperties {
        let mut kv: Vec<KeyValue> = schema
            .metadata()
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        kv.sort_by(|a, b| a.key.cmp(&b.key));
        let mut b = WriterProperties::builder()
            .set_key_value_metadata((!kv.is_empty()).then_some(kv))
            .set_compression(self.compression)
            .set_max_row_group_row_count(Some(self.row_group_rows))
            .set_dictionary_enabled(self.dictionary)
            .set_created_by(self.created_by.clone())
            // Lists and maps get the Parquet spec's field names (element,
            // key_value), as arrow-go writes them: readers see the same names.
            .set_coerce_types(true);
        for (c, on) in &self.dictionary_columns {
            b = b.set_column_dictionary_enabled(ColumnPath::new(vec![c.clone()]), *on);
        }
        b.build()
    }
}

/// One Parquet file being written into memory.
pub struct FileWriter {
    schema: SchemaRef,
    /// None once finished or after a failed call.
    w: Option<ArrowWriter<Vec<u8>>>,
    /// The file's last bytes, once finished.
    last: Vec<u8>,
}

impl FileWriter {
    /// Starts a file of `schema` (stored in the footer as `ARROW:schema`,
    /// so readers get the Arrow types back). A schema Parquet can't hold
    /// is InvalidInput.
    pub fn new(schema: SchemaRef, o: &Options) -> Result<FileWriter, Error> {
        let w = ArrowWriter::try_new(
            Vec::with_capacity(1 << 20),
            Arc::clone(&schema),
            Some(o.properties(&schema)),
        )
        .map_err(|e| Error::invalid_input(format!("schema not writable as Parquet: {e}")))?;
        Ok(FileWriter {
            schema,
            w: Some(w),
            last: Vec::new(),
        })
    }

    fn live(&mut self) -> Result<&mut ArrowWriter<Vec<u8>>, Error> {
        self.w
            .as_mut()
            .ok_or_else(|| Error::invalid_state("parquet file already finished or failed"))
    }

    /// Encodes `columns` (the file schema's columns, in order); returns
    /// the bytes this call completed, valid until the next call.
    pub fn write(&mut self, columns: Vec<Arc<dyn Array>>) -> Result<&[u8], Error> {
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), columns).map_err(|e| {
            Error::invalid_input(format!("batch does not match the file's schema: {e}"))
        })?;
        let w = self.live()?;
        w.inner_mut().clear();
        let res = w.write(&batch).and_then(|()| w.sync().map_err(Into::into));
        if let Err(e) = res {
            self.w = None;
            return Err(Error::internal(format!("parquet: {e}")));
        }
        Ok(self.w.as_ref().map_or(&[], |w| w.inner().as_slice()))
    }

    /// Flushes the last row group and writes the footer; returns the
    /// bytes left, valid until the writer is dropped.
    pub fn finish(&mut self) -> Result<&[u8], Error> {
        let Some(mut w) = self.w.take() else {
            return Err(Error::invalid_state(
                "parquet file already finished or failed",
            ));
        };
        w.inner_mut().clear();
        let leaves = match w.finish() {
            Ok(md) => md.file_metadata().schema_descr().num_columns(),
            Err(e) => return Err(Error::internal(format!("parquet: {e}"))),
        };
        // The writer has nothing more to give; keep the bytes here so the
        // slice stays valid, and refuse later calls (self.w is None).
        self.last = std::mem::take(w.inner_mut());
        type_defined_float_order(&mut self.last, leaves);
        Ok(&self.last)
    }
}

/// Declares float columns in the footer of `file` (a whole file, or its
/// tail from the last row group on) with the type-defined column order
/// instead of the IEEE 754 total order that arrow-rs 60 declares, whose
/// min and max readers that predate it (pyarrow 26, arrow-go) ignore.
/// The statistics fit both: arrow-rs leaves NaN out of min and max
/// unless a chunk holds only NaN, and readers ignore a NaN bound under
/// the type-defined order. Returns false, changing nothing, when the
/// footer does not end as expected.
///
/// The footer's FileMetaData ends with field 7, column_orders (the last
/// field arrow-rs writes without encryption): in Thrift's compact
/// protocol a list header, one 3-byte union per leaf column (field 1
/// TYPE_ORDER, 2 IEEE_754_TOTAL_ORDER or 3 INT96 order, each an empty
/// struct: `0x1C|0x2C|0x3C, 0, 0`), and the struct's stop byte. Both
/// orders encode to the same length, so the bytes are edited in place.
pub fn type_defined_float_order(file: &mut [u8], leaves: usize) -> bool {
    let n = file.len();
    if n < 12 || &file[n - 4..] != b"PAR1" || leaves == 0 {
        return false;
    }
    let len = u32::from_le_bytes([file[n - 8], file[n - 7], file[n - 6], file[n - 5]]) as usize;
    if len + 8 > n {
        return false;
    }
    let footer = &mut file[n - 8 - len..n - 8];
    let m = footer.len();
    // stop byte, the unions, the list header (1 byte under 15 elements,
    // else 0xFC and a varint), the field header (delta form, type list).
    let unions = 3 * leaves;
    let mut header = vec![];
    if leaves < 15 {
        header.push(((leaves as u8) << 4) | 0x0C);
    } else {
        header.push(0xFC);
        let mut v = leaves;
        while v >= 0x80 {
            header.push((v as u8 & 0x7F) | 0x80);
            v >>= 7;
        }
        header.push(v as u8);
    }
    let Some(start) = m.checked_sub(1 + unions) else {
        return false;
    };
    let Some(hstart) = start.checked_sub(header.len() + 1) else {
        return false;
    };
    if footer[m - 1] != 0
        || footer[hstart + 1..start] != header[..]
        || footer[hstart] & 0x0F != 0x09
        || footer[hstart] >> 4 == 0
    {
        return false;
    }
    let orders = &mut footer[start..m - 1];
    if !orders
        .chunks(3)
        .all(|u| matches!(u[0], 0x1C | 0x2C | 0x3C) && u[1] == 0 && u[2] == 0)
    {
        return false;
    }
    for u in orders.chunks_mut(3) {
        if u[0] == 0x2C {
            u[0] = 0x1C;
        }
    }
    true
}

// ---- C surface ----

/// Starts a Parquet file. `schema` (a struct schema: the record batch's
/// fields and metadata) is always taken (left released) and released
/// before returning. `opts` is the JSON of [`Options`]. On success `*out`
/// holds a writer the caller frees with `openetl_parquet_free`.
///
/// # Safety
/// `schema` is a valid ArrowSchema; `opts` has `opts_len` readable bytes;
/// `out` is writable; `err` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_parquet_new(
    schema: *mut FFI_ArrowSchema,
    opts: *const u8,
    opts_len: usize,
    out: *mut *mut c_void,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        let schema = if schema.is_null() {
            return Err(Error::invalid_input("schema is null"));
        } else {
            // SAFETY: schema is a valid ArrowSchema; from_raw moves it out
            // and leaves the caller's struct released.
            unsafe { FFI_ArrowSchema::from_raw(schema) }
        };
        ffi::non_null(out, "out")?;
        // SAFETY: the caller guarantees opts_len readable bytes.
        let opts = Options::from_json(unsafe { ffi::bytes(opts, opts_len, "opts") }?)?;
        let schema = Schema::try_from(&schema)
            .map_err(|e| Error::invalid_input(format!("importing the schema: {e}")))?;
        let fw = FileWriter::new(Arc::new(schema), &opts)?;
        // SAFETY: out is non-null and writable.
        unsafe { *out = Box::into_raw(Box::new(fw)).cast::<c_void>() };
        Ok(())
    })
}

/// Encodes one record batch, exported as a struct array (`array`) with
/// its schema (`schema`; both required, a null one is status 1), whose
/// columns must have the file's types. Both are always taken and
/// released before returning. On status 0 `*out`/`*out_len`
/// point at the bytes the call completed (often none), owned by the
/// writer and valid until its next call. After a failure the writer
/// refuses every call but free.
///
/// # Safety
/// `w` is a live writer, not used concurrently; `array` and `schema` are
/// valid C Data Interface structs; `out`, `out_len` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_parquet_write(
    w: *mut c_void,
    array: *mut FFI_ArrowArray,
    schema: *mut FFI_ArrowSchema,
    out: *mut *const u8,
    out_len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        let array = if array.is_null() {
            None
        } else {
            // SAFETY: a valid ArrowArray, moved out (left released).
            Some(unsafe { FFI_ArrowArray::from_raw(array) })
        };
        let schema = if schema.is_null() {
            None
        } else {
            // SAFETY: as above, for the schema.
            Some(unsafe { FFI_ArrowSchema::from_raw(schema) })
        };
        if w.is_null() {
            return Err(Error::new(Status::Closed, "parquet writer handle is null"));
        }
        ffi::non_null(out, "out")?;
        ffi::non_null(out_len, "out_len")?;
        let array = array.ok_or_else(|| Error::invalid_input("array is null"))?;
        let schema = schema.ok_or_else(|| Error::invalid_input("schema is null"))?;
        // SAFETY: valid C Data Interface structs; from_ffi takes the
        // array and checks its layout against the schema.
        let data = unsafe { arrow_array::ffi::from_ffi(array, &schema) }
            .map_err(|e| Error::invalid_input(format!("importing the batch: {e}")))?;
        if !matches!(data.data_type(), DataType::Struct(_)) {
            return Err(Error::invalid_input("batch is not a struct array"));
        }
        let st = StructArray::from(data);
        if st.null_count() > 0 {
            return Err(Error::invalid_input("batch has null rows"));
        }
        let (_, columns, _) = st.into_parts();
        // SAFETY: w is a live writer from openetl_parquet_new, not used
        // concurrently.
        let fw = unsafe { &mut *w.cast::<FileWriter>() };
        let bytes = fw.write(columns)?;
        // SAFETY: out and out_len are non-null and writable.
        unsafe {
            *out = bytes.as_ptr();
            *out_len = bytes.len();
        }
        Ok(())
    })
}

/// Writes the last row group and the footer. On status 0 `*out`/`*out_len`
/// point at the file's last bytes, owned by the writer and valid until it
/// is freed; later writes fail.
///
/// # Safety
/// As `openetl_parquet_write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_parquet_finish(
    w: *mut c_void,
    out: *mut *const u8,
    out_len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        if w.is_null() {
            return Err(Error::new(Status::Closed, "parquet writer handle is null"));
        }
        ffi::non_null(out, "out")?;
        ffi::non_null(out_len, "out_len")?;
        // SAFETY: w is a live writer, not used concurrently.
        let fw = unsafe { &mut *w.cast::<FileWriter>() };
        let bytes = fw.finish()?;
        // SAFETY: out and out_len are non-null and writable.
        unsafe {
            *out = bytes.as_ptr();
            *out_len = bytes.len();
        }
        Ok(())
    })
}

/// Frees a writer (finished or not); null is a no-op.
///
/// # Safety
/// `w` is null or a writer from `openetl_parquet_new` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_parquet_free(w: *mut c_void) {
    if w.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: per the contract, w came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(w.cast::<FileWriter>()) });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Float64Array, Int64Array};
    use arrow_schema::{DataType, Field};
    use parquet::basic::ColumnOrder;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    fn file(cols: usize) -> Vec<u8> {
        let fields: Vec<Field> = (0..cols)
            .map(|i| {
                let t = if i % 2 == 0 {
                    DataType::Float64
                } else {
                    DataType::Int64
                };
                Field::new(format!("c{i}"), t, true)
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let columns: Vec<Arc<dyn Array>> = (0..cols)
            .map(|i| -> Arc<dyn Array> {
                if i % 2 == 0 {
                    Arc::new(Float64Array::from(vec![
                        Some(1.5),
                        None,
                        Some(f64::NAN),
                        Some(-2.0),
                    ]))
                } else {
                    Arc::new(Int64Array::from(vec![Some(1), None, Some(3), Some(4)]))
                }
            })
            .collect();
        let o = Options::from_json(b"{}").unwrap();
        let mut w = FileWriter::new(schema, &o).unwrap();
        let mut out = w.write(columns).unwrap().to_vec();
        out.extend_from_slice(w.finish().unwrap());
        out
    }

    fn read(bytes: &[u8]) -> SerializedFileReader<std::fs::File> {
        let path = std::env::temp_dir().join(format!(
            "openetl-pqwrite-{}-{}.parquet",
            std::process::id(),
            bytes.len()
        ));
        std::fs::write(&path, bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        SerializedFileReader::new(f).unwrap()
    }

    #[test]
    fn float_columns_get_the_type_defined_order() {
        for cols in [1, 2, 15, 40] {
            let r = read(&file(cols));
            let md = r.metadata();
            let orders = md.file_metadata().column_orders().unwrap();
            assert_eq!(orders.len(), cols);
            for (i, o) in orders.iter().enumerate() {
                assert!(
                    matches!(o, ColumnOrder::TYPE_DEFINED_ORDER(_)),
                    "{cols} columns, column {i}: {o:?}"
                );
            }
            let st = md.row_group(0).column(0).statistics().unwrap();
            assert_eq!(st.min_bytes_opt().unwrap(), (-2.0f64).to_le_bytes());
            assert_eq!(st.max_bytes_opt().unwrap(), 1.5f64.to_le_bytes());
        }
    }

    #[test]
    fn an_unexpected_footer_is_left_alone() {
        let mut bytes = file(3);
        let n = bytes.len();
        bytes[n - 9] = 7; // the footer's last byte is no longer a stop
        let before = bytes.clone();
        assert!(!type_defined_float_order(&mut bytes, 3));
        assert_eq!(bytes, before);
        assert!(!type_defined_float_order(&mut [0u8; 4], 1));
    }
}
