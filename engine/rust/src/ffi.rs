//! Helpers for the C surface: catching panics, handing out error strings
//! and bytes, and checking pointers.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

use crate::error::{Error, Status};

/// Runs `f`, catching any panic. Returns the status and, through `err`
/// (when not null), an owned message for every status but Ok.
pub fn guard<F: FnOnce() -> Result<(), Error>>(err: *mut *mut c_char, f: F) -> i32 {
    install_panic_hook();
    let outer = IN_GUARD.with(|g| g.replace(true));
    // AssertUnwindSafe: a caught panic poisons the engine handle (see
    // lib.rs), so no half-updated state is used afterwards.
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_GUARD.with(|g| g.set(outer));
    let (status, message) = match result {
        Ok(Ok(())) => return Status::Ok as i32,
        Ok(Err(e)) => (e.status, e.message),
        Err(payload) => {
            let at = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or_default();
            let msg = panic_message(payload.as_ref());
            (Status::Panic, format!("engine panicked{at}: {msg}"))
        }
    };
    set_error(err, &message);
    status as i32
}

thread_local! {
    /// Where the last panic on this thread happened, for the error message.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Whether this thread is inside [`guard`].
    static IN_GUARD: Cell<bool> = const { Cell::new(false) };
}

/// Wraps the panic hook so that a panic inside [`guard`] prints nothing on
/// the host's stderr and its location goes into the error message instead.
/// Panics elsewhere (Rust tests) still reach the previous hook. The hook is
/// this library's own: other Rust code in the process has its own std.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_GUARD.try_with(Cell::get).unwrap_or(false) {
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()));
                let _ = PANIC_AT.try_with(|p| *p.borrow_mut() = at);
            } else {
                prev(info);
            }
        }));
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "unknown panic payload"
    }
}

/// Stores an owned copy of `message` in `*err`, if `err` is not null. The
/// caller frees it with `openetl_string_free`.
pub fn set_error(err: *mut *mut c_char, message: &str) {
    if err.is_null() {
        return;
    }
    let c = CString::new(message.replace('\0', "\u{FFFD}")).unwrap_or_default();
    // SAFETY: err is non-null and, by the ABI contract, points to a
    // writable `char*` the caller owns.
    unsafe { *err = c.into_raw() };
}

/// Frees a string made by [`set_error`].
///
/// # Safety
/// `s` is null or came from [`set_error`] and was not freed before.
pub unsafe fn free_string(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: per the contract, s came from CString::into_raw.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Hands `bytes` to C as a pointer and length, freed by [`free_bytes`].
pub fn give_bytes(bytes: Vec<u8>) -> (*mut u8, usize) {
    let b = bytes.into_boxed_slice();
    let len = b.len();
    (Box::into_raw(b).cast::<u8>(), len)
}

/// Frees bytes made by [`give_bytes`].
///
/// # Safety
/// `ptr` is null or came from [`give_bytes`] with this `len`, not freed before.
pub unsafe fn free_bytes(ptr: *mut u8, len: usize) {
    if !ptr.is_null() {
        let slice = std::ptr::slice_from_raw_parts_mut(ptr, len);
        // SAFETY: per the contract, (ptr, len) is a leaked Box<[u8]>.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// A byte slice from C, checking that a non-empty one has a pointer.
///
/// # Safety
/// When not null, `ptr` points to `len` readable bytes that stay valid and
/// unmodified for `'a`.
pub unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Error::invalid_input(format!(
            "{what} is null with length {len}"
        )));
    }
    // SAFETY: non-null, and the caller guarantees len readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Fails with InvalidInput when `p` is null.
pub fn non_null<T>(p: *mut T, what: &str) -> Result<(), Error> {
    if p.is_null() {
        Err(Error::invalid_input(format!("{what} is null")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// The boundary's proof without the `debug-panic` hook: a panic inside
    /// [`guard`] comes back as status 3 with its message and location,
    /// and the thread carries on (the hook's C-level test, in
    /// tests/engine.rs, runs with the feature on).
    #[test]
    fn guard_catches_panics() {
        for _ in 0..3 {
            let mut err: *mut c_char = std::ptr::null_mut();
            let st = guard(&mut err, || -> Result<(), Error> {
                let v: Option<u8> = std::hint::black_box(None);
                panic!("boom {v:?}")
            });
            assert_eq!(st, Status::Panic as i32);
            assert!(!err.is_null());
            // SAFETY: err came from set_error and is freed once here.
            let msg = unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned();
            unsafe { free_string(err) };
            assert!(msg.starts_with("engine panicked at src/ffi.rs:"), "{msg}");
            assert!(msg.ends_with(": boom None"), "{msg}");
        }
        // No message wanted: still a status, never an unwind.
        let st = guard(std::ptr::null_mut(), || -> Result<(), Error> {
            panic!("quiet")
        });
        assert_eq!(st, Status::Panic as i32);
        let st = guard(std::ptr::null_mut(), || Err(Error::invalid_state("x")));
        assert_eq!(st, Status::InvalidState as i32);
        assert_eq!(guard(std::ptr::null_mut(), || Ok(())), Status::Ok as i32);
    }
}
