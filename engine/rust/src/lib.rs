//! OpenETL engine: raw source records to Arrow, for the Go package
//! `github.com/openetl/etl/engine`, which calls it through cgo.
//!
//! The Rust API is sans-IO and push-based: [`Engine::push`] takes one input
//! batch ([`input::RawRows`]) and returns Arrow rows, quarantined rows and
//! lane boundaries; after it, [`Engine::changes`] and [`Engine::held`]
//! report the push's schema outcomes and held-back values. One file per
//! concern: `json.rs` (scanner), `infer.rs` and `nested.rs` (inference),
//! `decl.rs`, `coerce.rs` and `rows.rs` (declared rows), `state.rs`,
//! `names.rs`, `hold.rs`, `quarantine.rs`, `route.rs`, `meta.rs`. This
//! file is the C surface over it; its header is
//! `engine/include/openetl_engine.h`. The ABI stays `v1`: the functions
//! added since (`openetl_engine_changes`, `_held`, `_release`) are new
//! symbols, so a stale library fails to link.
//!
//! # The C contract
//!
//! * Every function returns an `int32_t` status (see [`Status`]): 0 ok,
//!   1 invalid input, 2 invalid state, 3 panic, 4 internal, 5 closed. On
//!   any status but 0, `*err` (when `err` is not null) receives an owned
//!   message the caller frees with `openetl_string_free`.
//! * No panic crosses the boundary: each function runs its body under
//!   `catch_unwind`. After a panic inside a push the handle is poisoned and
//!   every later push returns 3; the caller must free it.
//! * Arrow crosses through the C Data Interface with move semantics; each
//!   function says who releases what.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod avro;
pub mod coerce;
pub mod columns;
pub mod decl;
pub mod engine;
pub mod error;
mod ffi;
pub mod hold;
pub mod infer;
pub mod input;
pub mod json;
pub mod keys;
pub mod meta;
pub mod names;
pub mod nested;
pub mod policy;
pub mod policy_id;
pub mod pqwrite;
pub mod quarantine;
pub mod route;
pub mod rows;
pub mod state;
pub mod tape;

use std::ffi::{c_char, c_void};

use arrow_array::{Array, StructArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;

pub use crate::engine::{Config, Engine, PushOutput};
pub use crate::error::{Error, Status};
pub use crate::quarantine::{Quarantined, Reason};

/// The ABI version this library implements; also the suffix of
/// `openetl_engine_abi_v1`, so a library of another version fails to link.
pub const ABI_VERSION: u32 = 1;

/// What an engine handle points to.
struct Handle {
    engine: Engine,
    /// Set when a push panicked: the engine's state may be half-updated.
    poisoned: bool,
}

impl Handle {
    /// Fails when an earlier panic left the engine unusable.
    fn usable(&self) -> Result<(), Error> {
        if self.poisoned {
            Err(Error::new(
                Status::Panic,
                "engine is unusable after an earlier panic",
            ))
        } else {
            Ok(())
        }
    }
}

/// Returns the ABI version (1). Its name is the link-time check.
#[unsafe(no_mangle)]
pub extern "C" fn openetl_engine_abi_v1() -> u32 {
    ABI_VERSION
}

/// Creates an engine from a JSON config (see [`Engine::from_config_json`]).
/// On success `*out` holds a handle the caller frees with
/// `openetl_engine_free`. A corrupt state is status 2.
///
/// # Safety
/// `cfg` points to `cfg_len` readable bytes (or is null with length 0);
/// `out` points to a writable pointer; `err` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_new(
    cfg: *const u8,
    cfg_len: usize,
    out: *mut *mut c_void,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        ffi::non_null(out, "out")?;
        // SAFETY: the caller guarantees cfg_len readable bytes at cfg for
        // the duration of the call.
        let cfg = unsafe { ffi::bytes(cfg, cfg_len, "cfg") }?;
        let engine = Engine::from_config_json(cfg)?;
        let h = Box::into_raw(Box::new(Handle {
            engine,
            poisoned: false,
        }));
        // SAFETY: out is non-null and writable per the contract.
        unsafe { *out = h.cast::<c_void>() };
        Ok(())
    })
}

/// Frees an engine handle; null is a no-op. The handle must not be used
/// afterwards.
///
/// # Safety
/// `eng` is null or a handle from `openetl_engine_new` not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_free(eng: *mut c_void) {
    if eng.is_null() {
        return;
    }
    // Dropping an engine runs no user code; a panic here (allocator abort
    // aside) would be a bug, and must still not unwind into C.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: per the contract, eng came from Box::into_raw in
        // openetl_engine_new and is freed once.
        drop(unsafe { Box::from_raw(eng.cast::<Handle>()) });
    });
}

/// Pushes one batch of one stream.
///
/// Input: `in_array` is a struct array `op uint8, seq int64, key binary,
/// payload binary` (see [`input::data_type`]); `in_schema` may be null,
/// in which case that type is assumed. **The engine always takes ownership
/// of both** (moves them out, leaving them released) and releases them
/// before returning, whatever the status.
///
/// Outputs, written only on status 0:
/// * `*out_rows` = rows taken; when > 0, `out_array`/`out_schema` receive
///   the record batch (a struct array), moved to the caller, who releases
///   it. When 0 they are left untouched.
/// * `*q_rows` = rows quarantined (rows a row filter dropped are the rest:
///   the batch less rows taken and quarantined); when > 0, `q_array`/`q_schema` receive
///   the quarantine batch `row uint32, reason utf8, detail utf8`, likewise.
/// * `lane_offsets[0..=lanes]`: lane i's rows are `[lane_offsets[i],
///   lane_offsets[i+1])`; `lane_offsets_len` must be lanes + 1.
///
/// The four out-structs must be released (zeroed memory will do) on entry.
///
/// # Safety
/// Pointers are valid for the call: `stream` has `stream_len` bytes of
/// UTF-8; `in_array` (and `in_schema` if not null) are valid C Data
/// Interface structs; the out-structs are writable; `lane_offsets` has
/// `lane_offsets_len` writable entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_push(
    eng: *mut c_void,
    stream: *const u8,
    stream_len: usize,
    in_array: *mut FFI_ArrowArray,
    in_schema: *mut FFI_ArrowSchema,
    synced_at_micros: i64,
    out_array: *mut FFI_ArrowArray,
    out_schema: *mut FFI_ArrowSchema,
    q_array: *mut FFI_ArrowArray,
    q_schema: *mut FFI_ArrowSchema,
    lane_offsets: *mut i64,
    lane_offsets_len: usize,
    out_rows: *mut i64,
    q_rows: *mut i64,
    err: *mut *mut c_char,
) -> i32 {
    let mut poison = false;
    let status = ffi::guard(err, || {
        // Take the input first so it is released on every path.
        let input = if in_array.is_null() {
            None
        } else {
            // SAFETY: in_array is a valid ArrowArray; from_raw moves it out
            // and leaves the caller's struct released.
            Some(unsafe { FFI_ArrowArray::from_raw(in_array) })
        };
        let schema = if in_schema.is_null() {
            None
        } else {
            // SAFETY: as above, for the schema.
            Some(unsafe { FFI_ArrowSchema::from_raw(in_schema) })
        };
        if eng.is_null() {
            return Err(Error::new(Status::Closed, "engine handle is null"));
        }
        // SAFETY: eng is a live handle from openetl_engine_new; the Go side
        // never calls one handle from two threads at once.
        let h = unsafe { &mut *eng.cast::<Handle>() };
        if h.poisoned {
            return Err(Error::new(
                Status::Panic,
                "engine is unusable after an earlier panic",
            ));
        }
        let input = input.ok_or_else(|| Error::invalid_input("in_array is null"))?;
        for (p, what) in [
            (out_array.cast::<c_void>(), "out_array"),
            (out_schema.cast(), "out_schema"),
            (q_array.cast(), "q_array"),
            (q_schema.cast(), "q_schema"),
            (lane_offsets.cast(), "lane_offsets"),
            (out_rows.cast(), "out_rows"),
            (q_rows.cast(), "q_rows"),
        ] {
            ffi::non_null(p, what)?;
        }
        // SAFETY: the out-structs are non-null and valid for reads.
        let released = unsafe {
            (*out_array).is_released()
                && (*out_schema).release().is_none()
                && (*q_array).is_released()
                && (*q_schema).release().is_none()
        };
        if !released {
            return Err(Error::invalid_input(
                "output structs must be released on entry",
            ));
        }
        let lanes = h.engine.config().lanes as usize;
        if lane_offsets_len != lanes + 1 {
            return Err(Error::invalid_input(format!(
                "lane_offsets has {lane_offsets_len} entries, want lanes+1 = {}",
                lanes + 1
            )));
        }
        // SAFETY: the caller guarantees stream_len readable bytes.
        let stream = unsafe { ffi::bytes(stream, stream_len, "stream") }?;
        let stream = std::str::from_utf8(stream)
            .map_err(|_| Error::invalid_input("stream name is not UTF-8"))?;

        let data = match &schema {
            // SAFETY: input and schema are valid C Data Interface structs;
            // from_ffi takes ownership of input and validates the layout.
            Some(s) => unsafe { arrow_array::ffi::from_ffi(input, s) },
            // SAFETY: as above; the type is the documented input type.
            None => unsafe { arrow_array::ffi::from_ffi_and_data_type(input, input::data_type()) },
        }
        .map_err(|e| Error::invalid_input(format!("importing the input batch: {e}")))?;
        drop(schema);
        let array = arrow_array::make_array(data);
        let batch = array
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| Error::invalid_input("input batch is not a struct array"))?;
        let rows = input::RawRows::new(batch)?;

        poison = true;
        let out = h.engine.push(stream, &rows, synced_at_micros)?;
        poison = false;
        // The input (Go memory) is released here, before returning.
        drop(array);

        let q = quarantine::batch(&out.quarantined)?;
        let q_export = match &q {
            Some(b) => {
                let s = FFI_ArrowSchema::try_from(b.schema().as_ref())?;
                let a = FFI_ArrowArray::new(&StructArray::from(b.clone()).into_data());
                Some((a, s))
            }
            None => None,
        };
        let r_export = match &out.record {
            Some(b) => {
                let s = FFI_ArrowSchema::try_from(b.schema().as_ref())?;
                let a = FFI_ArrowArray::new(&StructArray::from(b.clone()).into_data());
                Some((a, s))
            }
            None => None,
        };
        let n_out = out.record.as_ref().map_or(0, |b| b.num_rows());
        // Nothing below can fail: write every output.
        // SAFETY: lane_offsets has lanes + 1 writable entries (checked).
        let offs = unsafe { std::slice::from_raw_parts_mut(lane_offsets, lane_offsets_len) };
        for (o, &v) in offs.iter_mut().zip(&out.lane_offsets) {
            *o = v as i64;
        }
        // SAFETY: out_rows and q_rows are non-null and writable.
        unsafe {
            *out_rows = n_out as i64;
            *q_rows = out.quarantined.len() as i64;
        }
        if let Some((a, s)) = r_export {
            // SAFETY: the out-structs are writable and released (checked),
            // so overwriting them leaks nothing; ownership moves to the caller.
            unsafe {
                std::ptr::write(out_array, a);
                std::ptr::write(out_schema, s);
            }
        }
        if let Some((a, s)) = q_export {
            // SAFETY: as above.
            unsafe {
                std::ptr::write(q_array, a);
                std::ptr::write(q_schema, s);
            }
        }
        Ok(())
    });
    if status == Status::Panic as i32 && poison && !eng.is_null() {
        // SAFETY: eng is the live handle used above; the closure's borrow
        // of it has ended.
        unsafe { (*eng.cast::<Handle>()).poisoned = true };
    }
    status
}

/// Exports the engine state (each stream's columns) as JSON bytes. On
/// success `*out`/`*out_len` hold bytes the caller frees with
/// `openetl_bytes_free`.
///
/// # Safety
/// `eng` is a live handle; `out` and `out_len` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_state(
    eng: *mut c_void,
    out: *mut *mut u8,
    out_len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        if eng.is_null() {
            return Err(Error::new(Status::Closed, "engine handle is null"));
        }
        ffi::non_null(out, "out")?;
        ffi::non_null(out_len, "out_len")?;
        // SAFETY: eng is a live handle, not used concurrently.
        let h = unsafe { &*eng.cast::<Handle>() };
        if h.poisoned {
            return Err(Error::new(
                Status::Panic,
                "engine is unusable after an earlier panic",
            ));
        }
        let (p, n) = ffi::give_bytes(h.engine.state());
        // SAFETY: out and out_len are non-null and writable.
        unsafe {
            *out = p;
            *out_len = n;
        }
        Ok(())
    })
}

/// Exports the schema outcomes of the last push as JSON bytes, a list of
/// `{"stream","column","kind","from","to"}` (see
/// [`engine::SchemaChange`]); `*out_len` is 0 and `*out` null when there
/// are none. Bytes are freed with `openetl_bytes_free`.
///
/// # Safety
/// `eng` is a live handle; `out` and `out_len` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_changes(
    eng: *mut c_void,
    out: *mut *mut u8,
    out_len: *mut usize,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        if eng.is_null() {
            return Err(Error::new(Status::Closed, "engine handle is null"));
        }
        ffi::non_null(out, "out")?;
        ffi::non_null(out_len, "out_len")?;
        // SAFETY: eng is a live handle, not used concurrently.
        let h = unsafe { &*eng.cast::<Handle>() };
        h.usable()?;
        let changes = h.engine.changes();
        let (p, n) = if changes.is_empty() {
            (std::ptr::null_mut(), 0)
        } else {
            let list: Vec<serde_json::Value> = changes
                .iter()
                .map(|c| {
                    serde_json::json!({"stream": c.stream, "column": c.column,
                        "kind": c.kind, "from": c.from, "to": c.to})
                })
                .collect();
            ffi::give_bytes(serde_json::Value::Array(list).to_string().into_bytes())
        };
        // SAFETY: out and out_len are non-null and writable.
        unsafe {
            *out = p;
            *out_len = n;
        }
        Ok(())
    })
}

/// Moves the values the last push held back out as a batch
/// `row uint32, column utf8, value binary, reason utf8, detail utf8`
/// (see [`hold`]; reason and detail are empty but for cells held on their
/// own): `*n_rows` is the
/// count, and when > 0 `out_array`/`out_schema` (released on entry)
/// receive the batch, owned by the caller.
///
/// # Safety
/// `eng` is a live handle; the out-structs and `n_rows` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_held(
    eng: *mut c_void,
    out_array: *mut FFI_ArrowArray,
    out_schema: *mut FFI_ArrowSchema,
    n_rows: *mut i64,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        if eng.is_null() {
            return Err(Error::new(Status::Closed, "engine handle is null"));
        }
        ffi::non_null(out_array, "out_array")?;
        ffi::non_null(out_schema, "out_schema")?;
        ffi::non_null(n_rows, "n_rows")?;
        // SAFETY: eng is a live handle, not used concurrently.
        let h = unsafe { &*eng.cast::<Handle>() };
        h.usable()?;
        let b = hold::batch(h.engine.held())?;
        // SAFETY: n_rows is non-null and writable.
        unsafe { *n_rows = b.as_ref().map_or(0, |b| b.num_rows() as i64) };
        if let Some(b) = b {
            let s = FFI_ArrowSchema::try_from(b.schema().as_ref())?;
            let a = FFI_ArrowArray::new(&StructArray::from(b).into_data());
            // SAFETY: the out-structs are writable and, per the contract,
            // released; ownership moves to the caller.
            unsafe {
                std::ptr::write(out_array, a);
                std::ptr::write(out_schema, s);
            }
        }
        Ok(())
    })
}

/// Turns held values of one column back into Arrow: `n` values, value i
/// being `data[offsets[i]..offsets[i+1]]` (`offsets` has n + 1 entries),
/// of the column (destination name) of `stream`. On success
/// `out_array`/`out_schema` (released on entry) receive a struct array
/// with one field, the column at its type, owned by the caller. A value
/// the type can't take is status 1.
///
/// # Safety
/// Pointers are valid for the call with the lengths given.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_release(
    eng: *mut c_void,
    stream: *const u8,
    stream_len: usize,
    column: *const u8,
    column_len: usize,
    data: *const u8,
    data_len: usize,
    offsets: *const i64,
    n: usize,
    out_array: *mut FFI_ArrowArray,
    out_schema: *mut FFI_ArrowSchema,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        if eng.is_null() {
            return Err(Error::new(Status::Closed, "engine handle is null"));
        }
        ffi::non_null(out_array, "out_array")?;
        ffi::non_null(out_schema, "out_schema")?;
        // SAFETY: eng is a live handle, not used concurrently.
        let h = unsafe { &*eng.cast::<Handle>() };
        h.usable()?;
        // SAFETY: the caller guarantees the lengths.
        let (stream, column, data) = unsafe {
            (
                ffi::bytes(stream, stream_len, "stream")?,
                ffi::bytes(column, column_len, "column")?,
                ffi::bytes(data, data_len, "data")?,
            )
        };
        let offs: &[i64] = if offsets.is_null() {
            return Err(Error::invalid_input("offsets is null"));
        } else {
            // SAFETY: offsets has n + 1 readable entries per the contract.
            unsafe { std::slice::from_raw_parts(offsets, n + 1) }
        };
        let mut values = Vec::with_capacity(n);
        for w in offs.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            values.push(
                data.get(a..b)
                    .ok_or_else(|| Error::invalid_input("offsets outside data"))?,
            );
        }
        let stream =
            std::str::from_utf8(stream).map_err(|_| Error::invalid_input("stream is not UTF-8"))?;
        let column =
            std::str::from_utf8(column).map_err(|_| Error::invalid_input("column is not UTF-8"))?;
        let arr = h.engine.release(stream, column, &values)?;
        let field = arrow_schema::Field::new(column, arr.data_type().clone(), true);
        let st = StructArray::try_new(vec![field].into(), vec![arr], None)?;
        let s = FFI_ArrowSchema::try_from(st.data_type())?;
        let a = FFI_ArrowArray::new(&st.into_data());
        // SAFETY: the out-structs are writable and released on entry.
        unsafe {
            std::ptr::write(out_array, a);
            std::ptr::write(out_schema, s);
        }
        Ok(())
    })
}

/// Frees bytes returned by `openetl_engine_state` or `openetl_engine_changes`.
///
/// # Safety
/// `(ptr, len)` came from `openetl_engine_state` and was not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_bytes_free(ptr: *mut u8, len: usize) {
    // SAFETY: forwarded contract.
    unsafe { ffi::free_bytes(ptr, len) }
}

/// Frees a message returned through `err`.
///
/// # Safety
/// `s` is null or came from this library's `err` out-parameter.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_string_free(s: *mut c_char) {
    // SAFETY: forwarded contract.
    unsafe { ffi::free_string(s) }
}

/// Test hook: panics inside the guard, returning status 3 and the panic
/// message, to prove no panic crosses into the caller. Only in a library
/// built with the cargo feature `debug-panic` (never the committed one).
///
/// # Safety
/// `err` is null or writable.
#[cfg(feature = "debug-panic")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_engine_debug_panic(err: *mut *mut c_char) -> i32 {
    ffi::guard(err, || -> Result<(), Error> {
        let boom: Option<u8> = std::hint::black_box(None);
        panic!("debug panic requested (value {boom:?})")
    })
}

/// Registers a plan for the Avro fast path (see the `avro` module) and
/// writes its ID to `*id`; the same plan bytes get the same ID.
///
/// # Safety
/// `plan` has `plan_len` readable bytes; `id` is writable; `err` is null
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openetl_avro_plan(
    plan: *const u8,
    plan_len: usize,
    id: *mut u32,
    err: *mut *mut c_char,
) -> i32 {
    ffi::guard(err, || {
        ffi::non_null(id.cast::<c_void>(), "id")?;
        // SAFETY: the caller guarantees plan_len readable bytes.
        let b = unsafe { ffi::bytes(plan, plan_len, "plan") }?;
        let v = avro::register(b)?;
        // SAFETY: id is non-null and writable.
        unsafe { *id = v };
        Ok(())
    })
}
