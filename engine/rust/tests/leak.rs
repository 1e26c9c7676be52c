//! Allocation accounting: a counting global allocator (this test binary
//! only) checks that pushing many small batches, JSON and declared rows,
//! returns Rust's live heap to where it started once outputs are dropped.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use openetl_engine::Engine;
use openetl_engine::input::{self, RawRows};
use openetl_engine::rows::encode;

struct Counting;

// Counted per thread, so the test harness's own threads don't disturb it.
thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(n: isize) {
    let _ = LIVE.try_with(|l| l.set(l.get() + n));
}

fn live() -> isize {
    LIVE.with(Cell::get)
}

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        add(l.size() as isize);
        // SAFETY: forwarded contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        add(-(l.size() as isize));
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        add(new as isize - l.size() as isize);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn many_small_batches_leave_no_allocations() {
    // A million pushes in release builds (under a second); fewer in debug.
    const N: usize = if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let start = live();
    {
        let mut e = Engine::from_config_json(
            br#"{"lanes":2,"streams":[{"name":"r","format":"row","columns":[
            {"name":"id","type":"int8"},{"name":"n","type":"numeric(8,2)"},{"name":"a","type":"_text"}]}]}"#,
        )
        .unwrap();
        let row = encode(&[Some(b"1"), Some(b"2.50"), Some(b"{x,\"y z\"}")]);
        let bad = encode(&[Some(b"x"), None, None]);
        let json = input::batch(&[
            (1u8, 1i64, &b"k"[..], &br#"{"a":1,"b":"x\ny"}"#[..]),
            (1, 2, b"", b"not json"),
        ]);
        let rows = input::batch(&[(1u8, 1i64, &b"k"[..], &row[..]), (2, 2, b"", &bad[..])]);
        let mut warm = 0;
        for i in 0..N {
            let (stream, b) = if i % 2 == 0 {
                ("j", &json)
            } else {
                ("r", &rows)
            };
            let raw = RawRows::new(b).unwrap();
            let out = e.push(stream, &raw, 0).unwrap();
            assert_eq!(out.record.as_ref().unwrap().num_rows(), 1);
            assert_eq!(out.quarantined.len(), 1);
            drop(out);
            if i == 9 {
                // Scratch buffers have reached their size.
                warm = live();
            }
        }
        let after = live();
        assert_eq!(after, warm, "live heap grew over {N} pushes");
        drop(e);
    }
    assert_eq!(live(), start, "engine freed everything");
}
