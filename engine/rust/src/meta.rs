//! Metadata columns: `_openetl_id`, `_openetl_op`, `_openetl_seq`,
//! `_openetl_synced_at`, appended after the stream's columns.
//!
//! `_openetl_id` is fixed forever (destinations deduplicate on it): the
//! lowercase hex, 32 characters, of the big-endian XXH3-128 (seed 0) of
//!
//! ```text
//! u32le(len(stream)) ‖ stream
//! ‖ 0x01 ‖ u32le(len(key)) ‖ key             when key is non-empty
//! ‖ 0x02 ‖ u32le(len(payload)) ‖ payload     when key is empty
//! ‖ i64le(seq)
//! ```
//!
//! The vectors in the tests below are published in the Go package doc.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, TimeUnit};
use xxhash_rust::xxh3::xxh3_128;

use crate::error::Error;
use crate::input::RawRows;
use crate::policy_id::{self, IdFrom, Part};

/// Names every metadata column starts with; source fields may not.
pub const RESERVED_PREFIX: &str = "_openetl_";

pub const ID: &str = "_openetl_id";
pub const OP: &str = "_openetl_op";
pub const SEQ: &str = "_openetl_seq";
pub const SYNCED_AT: &str = "_openetl_synced_at";
/// The metadata columns' names.
pub const NAMES: [&str; 4] = [ID, OP, SEQ, SYNCED_AT];

/// Whether a source name starts with [`RESERVED_PREFIX`] in any case:
/// readers of Parquet and Iceberg may fold case, and would take
/// `_OPENETL_ID` for the metadata column.
pub fn is_reserved(name: &str) -> bool {
    name.as_bytes()
        .get(..RESERVED_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_PREFIX.as_bytes()))
}

/// The name of an op code, or `None` for an unknown one.
pub fn op_name(op: u8) -> Option<&'static str> {
    match op {
        1 => Some("insert"),
        2 => Some("update"),
        3 => Some("delete"),
        _ => None,
    }
}

/// The length of every op name.
const OP_LEN: usize = 6;

/// [`op_name`]'s bytes, all [`OP_LEN`] long (a fixed-size copy).
#[inline]
fn op_bytes(op: u8) -> Option<&'static [u8; OP_LEN]> {
    match op {
        1 => Some(b"insert"),
        2 => Some(b"update"),
        3 => Some(b"delete"),
        _ => None,
    }
}

/// The op code of deletes.
pub const OP_DELETE: u8 = 3;

/// The `_openetl_id` hash of one record version. `scratch` is reused.
pub fn record_id(
    stream: &[u8],
    key: &[u8],
    payload: &[u8],
    seq: i64,
    scratch: &mut Vec<u8>,
) -> u128 {
    stream_prefix(stream, scratch);
    record_id_after_prefix(key, payload, seq, scratch)
}

/// Writes the stream's part of the hashed bytes, `u32le(len) ‖ stream`,
/// into `scratch`, which [`record_id_after_prefix`] then reuses.
fn stream_prefix(stream: &[u8], scratch: &mut Vec<u8>) {
    scratch.clear();
    scratch.extend_from_slice(&(stream.len() as u32).to_le_bytes());
    scratch.extend_from_slice(stream);
}

/// [`record_id`] with `scratch` holding exactly [`stream_prefix`]'s
/// bytes; it appends the rest of the hashed bytes.
#[inline]
fn record_id_after_prefix(key: &[u8], payload: &[u8], seq: i64, scratch: &mut Vec<u8>) -> u128 {
    let (tag, body) = if key.is_empty() {
        (2u8, payload)
    } else {
        (1u8, key)
    };
    scratch.reserve(1 + 4 + body.len() + 8);
    scratch.push(tag);
    scratch.extend_from_slice(&(body.len() as u32).to_le_bytes());
    scratch.extend_from_slice(body);
    scratch.extend_from_slice(&seq.to_le_bytes());
    xxh3_128(scratch)
}

/// [`record_id_after_prefix`] for a record whose policies change what
/// the raw key or payload would give away (see [`crate::policy_id`]):
///
/// ```text
/// ‖ 0x03 ‖ HMAC-SHA-256(hash key, key)        keys of hashed key columns
/// ‖ 0x04 ‖ u32le(len(row)) ‖ row              the delivered row, encoded
/// ‖ i64le(seq)
/// ```
///
/// per record by whether it has a key (see [`IdFrom`]); otherwise as
/// [`record_id_after_prefix`]. `i` is the record's output row.
fn record_id_from(
    from: &IdFrom,
    key: &[u8],
    payload: &[u8],
    i: usize,
    seq: i64,
    scratch: &mut Vec<u8>,
) -> u128 {
    let part = if key.is_empty() {
        from.keyless
    } else {
        from.keyed
    };
    match (part, &from.hmac) {
        (Part::Hmac, Some(h)) => {
            scratch.push(3);
            scratch.extend_from_slice(&h.digest(key));
        }
        (Part::Row, _) => {
            scratch.push(4);
            let at = scratch.len();
            scratch.extend_from_slice(&[0; 4]);
            policy_id::encode_row(&from.row, i, scratch);
            let len = (scratch.len() - at - 4) as u32;
            scratch[at..at + 4].copy_from_slice(&len.to_le_bytes());
        }
        _ => {
            return record_id_after_prefix(key, payload, seq, scratch);
        }
    }
    scratch.extend_from_slice(&seq.to_le_bytes());
    xxh3_128(scratch)
}

/// The stack buffer of [`record_id_short`].
const SHORT: usize = 128;

/// [`record_id_after_prefix`] in `buf`, whose first `prefix` bytes are
/// [`stream_prefix`]'s; `None` when the hashed bytes don't fit.
#[inline]
fn record_id_short(
    buf: &mut [u8; SHORT],
    prefix: usize,
    key: &[u8],
    payload: &[u8],
    seq: i64,
) -> Option<u128> {
    let (tag, body) = if key.is_empty() {
        (2u8, payload)
    } else {
        (1u8, key)
    };
    let end = prefix + 1 + 4 + body.len() + 8;
    if end > SHORT {
        return None;
    }
    let b = prefix + 5;
    buf[prefix] = tag;
    buf[prefix + 1..b].copy_from_slice(&(body.len() as u32).to_le_bytes());
    buf[b..b + body.len()].copy_from_slice(body);
    buf[end - 8..end].copy_from_slice(&seq.to_le_bytes());
    Some(xxh3_128(&buf[..end]))
}

/// Each byte's two lowercase hex digits.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 0xf]];
        i += 1;
    }
    t
};

/// Writes `v` as 32 lowercase hex digits, most significant first.
#[inline]
pub fn hex128(v: u128, out: &mut [u8; 32]) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        hex128_sse2(v, out);
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    hex128_table(v, out);
}

/// [`hex128`] a byte at a time, through [`HEX_PAIRS`].
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
#[inline]
fn hex128_table(v: u128, out: &mut [u8; 32]) {
    for (pair, b) in out.chunks_exact_mut(2).zip(v.to_be_bytes()) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(b)]);
    }
}

/// [`hex128`] sixteen digits at a time with SSE2 (part of every x86-64
/// CPU): each byte's two nibbles interleaved, high first, then mapped to
/// '0'..'9' and 'a'..'f' by adding '0' and, above 9, 39 more.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
fn hex128_sse2(v: u128, out: &mut [u8; 32]) {
    use core::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_and_si128, _mm_cmpgt_epi8, _mm_set_epi64x, _mm_set1_epi8,
        _mm_srli_epi16, _mm_unpackhi_epi8, _mm_unpacklo_epi8,
    };
    let be = v.to_be_bytes();
    let (mut lo8, mut hi8) = ([0u8; 8], [0u8; 8]);
    lo8.copy_from_slice(&be[..8]);
    hi8.copy_from_slice(&be[8..]);
    // SAFETY: these intrinsics only need SSE2, which this function is
    // compiled with (the cfg above); they read no memory. __m128i and
    // [u8; 16] have the same size and every bit pattern is valid for both.
    let (a, b) = unsafe {
        let x = _mm_set_epi64x(i64::from_le_bytes(hi8), i64::from_le_bytes(lo8));
        let mask = _mm_set1_epi8(0x0f);
        let hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
        let lo = _mm_and_si128(x, mask);
        let digit = |n: __m128i| {
            let above9 = _mm_and_si128(_mm_cmpgt_epi8(n, _mm_set1_epi8(9)), _mm_set1_epi8(39));
            _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8(b'0' as i8)), above9)
        };
        (
            std::mem::transmute::<__m128i, [u8; 16]>(digit(_mm_unpacklo_epi8(hi, lo))),
            std::mem::transmute::<__m128i, [u8; 16]>(digit(_mm_unpackhi_epi8(hi, lo))),
        )
    };
    out[..16].copy_from_slice(&a);
    out[16..].copy_from_slice(&b);
}

/// The `_openetl_id` of one record version as a string.
pub fn record_id_hex(stream: &[u8], key: &[u8], payload: &[u8], seq: i64) -> String {
    let mut out = [0u8; 32];
    hex128(
        record_id(stream, key, payload, seq, &mut Vec::new()),
        &mut out,
    );
    out.iter().map(|&b| b as char).collect()
}

/// The metadata fields, in order.
pub fn fields() -> [Field; 4] {
    [
        Field::new(ID, DataType::Utf8, false),
        Field::new(OP, DataType::Utf8, false),
        Field::new(SEQ, DataType::Int64, false),
        Field::new(
            SYNCED_AT,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
    ]
}

/// Builds the metadata columns for the input rows `order`, in that order.
pub fn columns(
    stream: &[u8],
    rows: &RawRows<'_>,
    order: &[u32],
    synced_at_micros: i64,
    scratch: &mut Vec<u8>,
    from: Option<&IdFrom>,
) -> Result<[ArrayRef; 4], Error> {
    let n = order.len();
    // Every offset below fits: the largest, n * 32, is checked here.
    if n.checked_mul(32).is_none_or(|b| b > i32::MAX as usize) {
        return Err(Error::internal("batch too large"));
    }
    let mut ids = Vec::with_capacity(n * 32);
    let mut ops_data = Vec::with_capacity(n * OP_LEN);
    let mut seqs = Vec::with_capacity(n);
    stream_prefix(stream, scratch);
    let prefix = scratch.len();
    // Short hashed bytes (the usual stream name and key) are laid out in
    // a stack buffer holding the prefix, without the vector's checks.
    let mut short = [0u8; SHORT];
    let short_ok = prefix <= SHORT;
    if short_ok {
        short[..prefix].copy_from_slice(scratch);
    }
    for (j, &r) in order.iter().enumerate() {
        let r = r as usize;
        let seq = rows.seq(r);
        let key = rows.key(r);
        let payload = if key.is_empty() { rows.payload(r) } else { &[] };
        // Records whose ID the policies change (see [`IdFrom`]).
        let from = from.filter(|f| {
            let part = if key.is_empty() { f.keyless } else { f.keyed };
            part != Part::Raw
        });
        let hash = if let Some(from) = from {
            scratch.truncate(prefix);
            Some(record_id_from(from, key, payload, j, seq, scratch))
        } else if short_ok {
            record_id_short(&mut short, prefix, key, payload, seq)
        } else {
            None
        };
        let hash = hash.unwrap_or_else(|| {
            scratch.truncate(prefix);
            record_id_after_prefix(key, payload, seq, scratch)
        });
        let mut id = [0u8; 32];
        hex128(hash, &mut id);
        ids.extend_from_slice(&id);
        let op = op_bytes(rows.op(r))
            .ok_or_else(|| Error::internal("an unknown op reached the output"))?;
        ops_data.extend_from_slice(op);
        seqs.push(seq);
    }
    let id_offs: Vec<i32> = (0..=n).map(|i| (i * 32) as i32).collect();
    let ops_offs: Vec<i32> = (0..=n).map(|i| (i * OP_LEN) as i32).collect();
    // SAFETY: ids holds only ASCII hex digits and op names are ASCII; the
    // offsets are monotonic and end at each buffer's length.
    let id = unsafe {
        StringArray::new_unchecked(
            OffsetBuffer::new(ScalarBuffer::from(id_offs)),
            Buffer::from_vec(ids),
            None,
        )
    };
    // SAFETY: as above.
    let op = unsafe {
        StringArray::new_unchecked(
            OffsetBuffer::new(ScalarBuffer::from(ops_offs)),
            Buffer::from_vec(ops_data),
            None,
        )
    };
    let seq = Int64Array::new(ScalarBuffer::from(seqs), None);
    let synced =
        TimestampMicrosecondArray::new(ScalarBuffer::from(vec![synced_at_micros; n]), None)
            .with_timezone("UTC");
    Ok([Arc::new(id), Arc::new(op), Arc::new(seq), Arc::new(synced)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published `_openetl_id` test vectors, shared with the Go
    /// tests: (stream, key, payload, seq, id).
    pub fn vectors() -> Vec<(String, String, String, i64, String)> {
        let v: serde_json::Value =
            serde_json::from_str(include_str!("../../testdata/openetl_id_vectors.json")).unwrap();
        v["vectors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                let s = |k: &str| x[k].as_str().unwrap().to_string();
                (
                    s("stream"),
                    s("key"),
                    s("payload"),
                    x["seq"].as_i64().unwrap(),
                    s("id"),
                )
            })
            .collect()
    }

    #[test]
    fn id_layout() {
        let mut s = Vec::new();
        let id = record_id(b"ab", b"k", b"ignored", 1, &mut s);
        let mut want = Vec::new();
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(b"ab");
        want.push(1);
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(b"k");
        want.extend_from_slice(&1i64.to_le_bytes());
        assert_eq!(s, want);
        assert_eq!(id, xxh3_128(&want));
        record_id(b"ab", b"", b"p", -2, &mut s);
        let mut want = Vec::new();
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(b"ab");
        want.push(2);
        want.extend_from_slice(&1u32.to_le_bytes());
        want.extend_from_slice(b"p");
        want.extend_from_slice(&(-2i64).to_le_bytes());
        assert_eq!(s, want);
    }

    #[test]
    fn short_ids_are_ids() {
        let long = vec![b'k'; 300];
        for stream in [&b""[..], b"orders", &[b's'; 100][..], &[b's'; 130][..]] {
            let mut scratch = Vec::new();
            stream_prefix(stream, &mut scratch);
            let prefix = scratch.len();
            if prefix > SHORT {
                continue;
            }
            let mut buf = [0u8; SHORT];
            buf[..prefix].copy_from_slice(&scratch);
            for n in 0..long.len() {
                for (key, payload) in [(&long[..n], &b"{}"[..]), (&b""[..], &long[..n])] {
                    let want = record_id(stream, key, payload, -5, &mut Vec::new());
                    match record_id_short(&mut buf, prefix, key, payload, -5) {
                        Some(got) => assert_eq!(got, want, "{} {n}", stream.len()),
                        None => assert!(prefix + 13 + n > SHORT),
                    }
                }
            }
        }
    }

    #[test]
    fn op_bytes_are_op_names() {
        for op in 0..=255u8 {
            assert_eq!(op_bytes(op).map(|b| &b[..]), op_name(op).map(str::as_bytes));
        }
    }

    #[test]
    fn hex_ways_agree() {
        let mut x: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
        for _ in 0..10_000 {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            hex128(x, &mut a);
            hex128_table(x, &mut b);
            assert_eq!(a, b, "{x:032x}");
            assert_eq!(std::str::from_utf8(&a).unwrap(), format!("{x:032x}"));
            x = x
                .wrapping_mul(0x2545_f491_4f6c_dd1d_9e37_79b9_7f4a_7c15)
                .rotate_left(17)
                ^ (x >> 3);
        }
        for x in [0, u128::MAX, 1, 0xf0f0_0f0f_a5a5_5a5a_ffff_0000_1234_5678] {
            let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
            hex128(x, &mut a);
            hex128_table(x, &mut b);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn hex_is_big_endian() {
        let mut out = [0u8; 32];
        hex128(0x0123456789abcdef_fedcba9876543210, &mut out);
        assert_eq!(&out, b"0123456789abcdeffedcba9876543210");
    }

    #[test]
    fn id_vectors() {
        let vs = vectors();
        assert!(vs.len() >= 7);
        for (stream, key, payload, seq, want) in vs {
            let got = record_id_hex(stream.as_bytes(), key.as_bytes(), payload.as_bytes(), seq);
            assert_eq!(
                got, want,
                "stream={stream:?} key={key:?} payload={payload:?} seq={seq}"
            );
        }
    }
}
