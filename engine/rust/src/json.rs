//! The document scanner: one pass over one JSON document that validates it
//! completely (RFC 8259) and hands each top-level field to a [`FieldSink`]
//! as a borrowed key and a classified value.
//!
//! Nothing here allocates unless a key or string has escapes, and then only
//! into buffers the caller owns and reuses. Errors carry a byte position
//! and a fixed message, never row data.

use crate::infer::Kind;
use crate::quarantine::{Reason, Reject};

/// The deepest nesting accepted: the document object is level 1. Deeper
/// documents are quarantined as `too_deep`. The scanner recurses once per
/// level, so this also bounds its stack use.
pub const MAX_DEPTH: usize = 64;

/// One top-level field's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Value {
    pub kind: Kind,
    /// For [`Kind::Text`] without escapes: the bytes between the quotes, as
    /// offsets into the document. With escapes (`in_arena`): the unescaped
    /// bytes, as offsets into the arena. For every other kind: the value's
    /// JSON text in the document.
    pub start: usize,
    pub end: usize,
    pub in_arena: bool,
    /// [`Kind::Int`]: the value as i64 bits; [`Kind::Float`]: f64 bits;
    /// [`Kind::Decimal`]: [`decimal_shape`];
    /// [`Kind::Bool`]: 0 or 1.
    pub num: u64,
}

/// The `num` of a [`Kind::Decimal`]: its scale and its integer digits.
#[inline]
pub fn decimal_shape(scale: usize, int_digits: usize) -> u64 {
    (scale as u64) | ((int_digits as u64) << 8)
}

/// Whether the decimal number with integer digits `int` and fraction
/// digits `frac` is exactly the shortest round-trip representation of
/// `f`'s magnitude, i.e. float64 holds it without rounding.
pub fn roundtrips(int: &[u8], frac: &[u8], f: f64) -> bool {
    let mut buf = zmij::Buffer::new();
    let shortest = buf.format_finite(f.abs()).as_bytes();
    let (mut a, mut b) = ([0u8; 24], [0u8; 24]);
    match (normal(int, frac, 0, &mut a), split_normal(shortest, &mut b)) {
        (Some((na, ea)), Some((nb, eb))) => na == nb && ea == eb && a[..na] == b[..nb],
        _ => false,
    }
}

/// A number's significant digits (into `out`) and the decimal exponent of
/// the first; `None` when there are more digits than `out` holds.
fn normal(int: &[u8], frac: &[u8], exp: i64, out: &mut [u8; 24]) -> Option<(usize, i64)> {
    let il = int.len();
    let total = il + frac.len();
    // The k-th digit of int ‖ frac (plain indexing: this runs for every
    // number of more than 15 digits).
    let at = |k: usize| if k < il { int[k] } else { frac[k - il] };
    let mut lead = 0;
    while lead < total && at(lead) == b'0' {
        lead += 1;
    }
    if lead == total {
        return Some((0, 0));
    }
    // A nonzero digit at `lead` stops this loop above it.
    let mut end = total;
    while at(end - 1) == b'0' {
        end -= 1;
    }
    let n = end - lead;
    if n > out.len() {
        return None;
    }
    for (o, k) in out.iter_mut().zip(lead..end) {
        *o = at(k);
    }
    Some((n, il as i64 - 1 - lead as i64 + exp))
}

/// [`normal`] of a float's text: `[-]int[.frac][e[+-]exp]`.
fn split_normal(t: &[u8], out: &mut [u8; 24]) -> Option<(usize, i64)> {
    let t = t.strip_prefix(b"-").unwrap_or(t);
    let (mant, exp) = match t.iter().position(|&b| b == b'e' || b == b'E') {
        Some(p) => {
            let e = std::str::from_utf8(&t[p + 1..]).ok()?;
            (&t[..p], e.trim_start_matches('+').parse::<i64>().ok()?)
        }
        None => (t, 0),
    };
    let (int, frac) = match mant.iter().position(|&b| b == b'.') {
        Some(p) => (&mant[..p], &mant[p + 1..]),
        None => (mant, &mant[mant.len()..]),
    };
    normal(int, frac, exp, out)
}

/// Receives the fields of a document, in document order.
pub trait FieldSink {
    /// Called once per top-level field. An error rejects the document.
    fn field(&mut self, key: &str, value: Value) -> Result<(), Reject>;

    /// The key the next field most likely has, or "" for no guess. It
    /// must be plain (see [`plain_key`]): the scanner then matches its
    /// bytes in place instead of scanning the key, and on a match calls
    /// [`FieldSink::likely_field`] instead of [`FieldSink::field`].
    #[inline(always)]
    fn likely_key(&self) -> &str {
        ""
    }

    /// [`FieldSink::field`] for a field whose key is `likely_key()`'s.
    #[inline(always)]
    fn likely_field(&mut self, key: &str, value: Value) -> Result<(), Reject> {
        self.field(key, value)
    }
}

/// Whether `key`'s JSON text is itself: no byte needs escaping ('"',
/// '\\', controls). Such keys can be matched against a document's bytes.
pub fn plain_key(key: &str) -> bool {
    key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Scans `doc`, which must be exactly one JSON object (surrounding
/// whitespace allowed), calling `sink` for each field. `key_buf` holds
/// unescaped keys; unescaped string values are appended to `arena`.
pub fn scan_object<S: FieldSink>(
    doc: &[u8],
    key_buf: &mut Vec<u8>,
    arena: &mut Vec<u8>,
    sink: &mut S,
) -> Result<(), Reject> {
    // UTF-8: outside strings only ASCII is valid JSON (any other byte is a
    // syntax error), and Scanner::string validates the strings that are not
    // ASCII. So a scanned document is valid UTF-8, and every span cut at a
    // quote or at a value's first and last byte is on char boundaries.
    let mut s = Scanner { doc, pos: 0 };
    s.ws();
    match s.peek() {
        Some(b'{') => {}
        other => return Err(s.not_an_object(other, arena)),
    }
    s.pos += 1;
    s.ws();
    if s.peek() == Some(b'}') {
        s.pos += 1;
    } else {
        loop {
            if s.peek() != Some(b'"') {
                return Err(s.err("expected a field name"));
            }
            s.pos += 1;
            // The likely key, matched in place: its bytes, a quote and a
            // colon (a plain key's JSON text is its bytes, so this is
            // exactly what scanning the string and the colon would find).
            let likely = {
                let k = sink.likely_key().as_bytes();
                let n = k.len();
                n > 0
                    && doc.get(s.pos + n) == Some(&b'"')
                    && doc.get(s.pos + n + 1) == Some(&b':')
                    && doc.get(s.pos..s.pos + n).is_some_and(|d| same_bytes(d, k))
            };
            let (ks, ke, kesc) = if likely {
                let ks = s.pos;
                let ke = ks + sink.likely_key().len();
                s.pos = ke + 2;
                (ks, ke, false)
            } else {
                let k = s.string()?;
                s.ws();
                if s.peek() != Some(b':') {
                    return Err(s.err("expected ':' after a field name"));
                }
                s.pos += 1;
                k
            };
            s.ws();
            let value = s.field_value(arena)?;
            if likely {
                // The key's bytes equal the &str likely_key returned, so
                // they are valid UTF-8.
                let raw = &doc[ks..ke];
                debug_assert!(std::str::from_utf8(raw).is_ok());
                // SAFETY: as above: raw equals a str's bytes.
                let key = unsafe { std::str::from_utf8_unchecked(raw) };
                sink.likely_field(key, value)?;
                s.ws();
                match s.peek() {
                    Some(b',') => {
                        s.pos += 1;
                        s.ws();
                        continue;
                    }
                    Some(b'}') => {
                        s.pos += 1;
                        break;
                    }
                    _ => return Err(s.err("expected ',' or '}' after a field value")),
                }
            }
            let key = if kesc {
                key_buf.clear();
                unescape(&doc[ks..ke], key_buf).map_err(|m| s.err_at(ks, m))?;
                std::str::from_utf8(key_buf).map_err(|_| s.err_at(ks, "invalid escape"))?
            } else {
                let raw = &doc[ks..ke];
                debug_assert!(std::str::from_utf8(raw).is_ok());
                // SAFETY: Scanner::string validated ks..ke as UTF-8 (it is a
                // string's content, cut at quote bytes).
                unsafe { std::str::from_utf8_unchecked(raw) }
            };
            sink.field(key, value)?;
            s.ws();
            match s.peek() {
                Some(b',') => {
                    s.pos += 1;
                    s.ws();
                }
                Some(b'}') => {
                    s.pos += 1;
                    break;
                }
                _ => return Err(s.err("expected ',' or '}' after a field value")),
            }
        }
    }
    s.ws();
    if s.pos != doc.len() {
        return Err(s.err("trailing characters after the document"));
    }
    Ok(())
}

/// `a == b` for slices of equal length, without a library call for short
/// ones (most keys).
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() <= 16 && a.len() == b.len() {
        return a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0;
    }
    a == b
}

fn describe(b: Option<u8>) -> &'static str {
    match b {
        None => "an empty document",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "a number",
        // Not reached: not_an_object names only valid JSON by its first
        // byte.
        Some(_) => "a value",
    }
}

/// Bytes that end the fast loop inside a string: controls, '"', '\\' and
/// non-ASCII bytes.
static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i >= 0x80;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `w` that is a stop byte of
/// [`STRING_STOP`] (a control, '"', '\\', and a non-ASCII byte when
/// `HIGH`); other bits may be set only above the lowest stop byte (a
/// borrow runs upward), so the lowest set bit is exact.
#[inline(always)]
fn stop_bits<const HIGH: bool>(w: u64) -> u64 {
    let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    let below_space = w.wrapping_sub(LO * 0x20) & !w & HI;
    let high = if HIGH { w & HI } else { 0 };
    below_space | high | zero(w ^ (LO * u64::from(b'"'))) | zero(w ^ (LO * u64::from(b'\\')))
}

/// One bit per byte of `chunk` (16 bytes), set for the stop bytes of
/// [`skip_plain`], computed with SSE2 (part of every x86-64 CPU).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn stop_mask16<const HIGH: bool>(chunk: &[u8]) -> u32 {
    use core::arch::x86_64::{
        _mm_and_si128, _mm_cmpeq_epi8, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_movemask_epi8,
        _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8,
    };
    let (mut lo, mut hi) = ([0u8; 8], [0u8; 8]);
    lo.copy_from_slice(&chunk[..8]);
    hi.copy_from_slice(&chunk[8..16]);
    // SAFETY: these intrinsics only need SSE2, which this function is
    // compiled with (the cfg above); they read no memory.
    let m = unsafe {
        let v = _mm_set_epi64x(i64::from_le_bytes(hi), i64::from_le_bytes(lo));
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // As signed bytes, non-ASCII bytes are negative: below 0x20 are
        // the controls and (unless excluded) the non-ASCII bytes.
        let mut low = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
        if !HIGH {
            low = _mm_and_si128(low, _mm_cmpgt_epi8(v, _mm_set1_epi8(-1)));
        }
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), low))
    };
    m as u32 & 0xffff
}

/// One step of [`skip_plain`]: the index of the first stop byte among the
/// 16 (or 8) bytes of `doc` from `i`, or when there is none the index
/// after them (`i` itself when fewer than 8 bytes remain). No byte from
/// `i` to the index returned is a stop byte.
#[inline(always)]
fn skip_plain_first<const HIGH: bool>(doc: &[u8], i: usize) -> usize {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(chunk) = doc.get(i..i + 16) {
        let m = stop_mask16::<HIGH>(chunk);
        return i + if m != 0 {
            m.trailing_zeros() as usize
        } else {
            16
        };
    }
    if let Some(chunk) = doc.get(i..i + 8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        let m = stop_bits::<HIGH>(u64::from_le_bytes(b));
        return i + if m != 0 {
            (m.trailing_zeros() / 8) as usize
        } else {
            8
        };
    }
    i
}

/// The index of the first stop byte of `doc` at or after `i`, or
/// `doc.len()`: sixteen bytes at a time, then eight, then one. Without
/// `HIGH`, non-ASCII bytes are not stop bytes (a string already known to
/// need UTF-8 validation).
#[inline(always)]
fn skip_plain<const HIGH: bool>(doc: &[u8], mut i: usize) -> usize {
    // Long strings: 32 bytes a step (two masks, one test).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(chunk) = doc.get(i..i + 32) {
        let m = stop_mask16::<HIGH>(&chunk[..16]) | (stop_mask16::<HIGH>(&chunk[16..]) << 16);
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += 32;
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    while let Some(chunk) = doc.get(i..i + 16) {
        let m = stop_mask16::<HIGH>(chunk);
        if m != 0 {
            return i + m.trailing_zeros() as usize;
        }
        i += 16;
    }
    while let Some(chunk) = doc.get(i..i + 8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        let m = stop_bits::<HIGH>(u64::from_le_bytes(b));
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < doc.len() && (!STRING_STOP[doc[i] as usize] || (!HIGH && doc[i] >= 0x80)) {
        i += 1;
    }
    i
}

/// 10^0 to 10^15, each exact in an f64.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

struct Scanner<'a> {
    doc: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.doc.get(self.pos).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    #[cold]
    fn err(&self, msg: &str) -> Reject {
        self.err_at(self.pos, msg)
    }

    #[cold]
    fn err_at(&self, pos: usize, msg: &str) -> Reject {
        if pos >= self.doc.len() {
            Reject::parse(format!("invalid JSON: unexpected end of document: {msg}"))
        } else {
            Reject::parse(format!("invalid JSON at byte {pos}: {msg}"))
        }
    }

    /// Scans a string whose opening quote is consumed. Returns the content
    /// span and whether it has escapes; the closing quote is consumed.
    /// Validates UTF-8; escapes are only skipped here and [`unescape`]
    /// validates them.
    #[inline(always)]
    fn string(&mut self) -> Result<(usize, usize, bool), Reject> {
        // Fast path, inlined: a plain ASCII string (most keys and short
        // values) ends at the first stop byte of its first bytes.
        let start = self.pos;
        let j = skip_plain_first::<true>(self.doc, start);
        if self.doc.get(j) == Some(&b'"') {
            self.pos = j + 1;
            return Ok((start, j, false));
        }
        self.string_rest(j)
    }

    /// [`Scanner::string`] past its fast path, which found the bytes from
    /// the string's start to `from` plain.
    #[inline(never)]
    fn string_rest(&mut self, from: usize) -> Result<(usize, usize, bool), Reject> {
        let start = self.pos;
        let doc = self.doc;
        let mut escaped = false;
        let mut non_ascii = false;
        let mut i = from;
        loop {
            i = if non_ascii {
                skip_plain::<false>(doc, i)
            } else {
                skip_plain::<true>(doc, i)
            };
            match doc.get(i) {
                None => {
                    self.pos = i;
                    return Err(self.err("unterminated string"));
                }
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    // Skip the escaped byte so `\"` does not end the string.
                    i += 2;
                }
                Some(&b) if b >= 0x80 => {
                    non_ascii = true;
                    i += 1;
                }
                Some(_) => {
                    self.pos = i;
                    return Err(self.err("control character in a string"));
                }
            }
        }
        if non_ascii && let Err(e) = std::str::from_utf8(&doc[start..i]) {
            self.pos = start + e.valid_up_to();
            return Err(self.err("invalid UTF-8 in a string"));
        }
        self.pos = i + 1;
        Ok((start, i, escaped))
    }

    /// A string that is not kept (inside nested values): escapes are still
    /// validated, through `arena`, which is left as it was.
    fn skip_string(&mut self, arena: &mut Vec<u8>) -> Result<(), Reject> {
        let (s, e, esc) = self.string()?;
        if esc {
            let mark = arena.len();
            let r = unescape(&self.doc[s..e], arena);
            arena.truncate(mark);
            r.map_err(|m| self.err_at(s, m))?;
        }
        Ok(())
    }

    /// A top-level field's value (level 2).
    fn field_value(&mut self, arena: &mut Vec<u8>) -> Result<Value, Reject> {
        let start = self.pos;
        let mut v = Value {
            kind: Kind::Null,
            start,
            end: start,
            in_arena: false,
            num: 0,
        };
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                let (s, e, esc) = self.string()?;
                v.kind = Kind::Text;
                if esc {
                    let mark = arena.len();
                    if let Err(m) = unescape(&self.doc[s..e], arena) {
                        arena.truncate(mark);
                        return Err(self.err_at(s, m));
                    }
                    v.in_arena = true;
                    v.start = mark;
                    v.end = arena.len();
                } else {
                    v.start = s;
                    v.end = e;
                }
                return Ok(v);
            }
            Some(b'-' | b'0'..=b'9') => {
                let (kind, num) = self.number_fast()?;
                v.kind = kind;
                v.num = num;
            }
            Some(b't') => {
                self.literal(b"true")?;
                v.kind = Kind::Bool;
                v.num = 1;
            }
            Some(b'f') => {
                self.literal(b"false")?;
                v.kind = Kind::Bool;
            }
            Some(b'n') => {
                self.literal(b"null")?;
            }
            Some(b'{' | b'[') => {
                self.skip_value(2, arena)?;
                v.kind = Kind::Nested;
            }
            _ => return Err(self.err("expected a value")),
        }
        v.end = self.pos;
        Ok(v)
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), Reject> {
        if self.doc[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// [`Scanner::number`], inlined for the common numbers: an integer
    /// or a float without exponent of at most 15 digits. It decides
    /// exactly as `number`'s own fast paths; anything else goes to
    /// `number` from the start.
    #[inline(always)]
    fn number_fast(&mut self) -> Result<(Kind, u64), Reject> {
        let doc = self.doc;
        let mut i = self.pos;
        let neg = doc.get(i) == Some(&b'-');
        if neg {
            i += 1;
        }
        let int_start = i;
        let mut m: u64 = 0;
        match doc.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(&d @ b'0'..=b'9') = doc.get(i) {
                    m = m.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                    i += 1;
                }
            }
            _ => return self.number(),
        }
        let int_digits = i - int_start;
        if int_digits > 15 {
            return self.number();
        }
        match doc.get(i) {
            Some(b'.') => {
                let frac_start = i + 1;
                let mut j = frac_start;
                while let Some(&d @ b'0'..=b'9') = doc.get(j) {
                    m = m.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                    j += 1;
                }
                let frac_digits = j - frac_start;
                if frac_digits == 0
                    || int_digits + frac_digits > 15
                    || matches!(doc.get(j), Some(b'e' | b'E'))
                {
                    return self.number();
                }
                self.pos = j;
                // At most 15 digits: m is exact and below 2^53, as in
                // `number`'s float fast path.
                let f = m as f64 / POW10[frac_digits];
                Ok((Kind::Float, if neg { -f } else { f }.to_bits()))
            }
            Some(b'e' | b'E') => self.number(),
            _ => {
                self.pos = i;
                // At most 15 digits: fits i64 either way.
                let v = if neg {
                    (m as i64).wrapping_neg()
                } else {
                    m as i64
                };
                Ok((Kind::Int, v as u64))
            }
        }
    }

    /// Scans a number, returning its kind and bits (see [`Value::num`]).
    #[inline]
    fn number(&mut self) -> Result<(Kind, u64), Reject> {
        let doc = self.doc;
        let start = self.pos;
        let mut i = start;
        let neg = doc[i] == b'-';
        if neg {
            i += 1;
        }
        let mut mag: u64 = 0;
        let mut overflow = false;
        let int_start = i;
        match doc.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => {
                while let Some(&d @ b'0'..=b'9') = doc.get(i) {
                    mag = mag.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                    i += 1;
                }
                // Up to 19 digits fit u64; 20 may not: redo them checked.
                if i - int_start > 19 {
                    let mut m: u64 = 0;
                    for &d in &doc[int_start..i] {
                        match m
                            .checked_mul(10)
                            .and_then(|m| m.checked_add(u64::from(d - b'0')))
                        {
                            Some(v) => m = v,
                            None => {
                                overflow = true;
                                break;
                            }
                        }
                    }
                    mag = m;
                }
            }
            _ => {
                self.pos = i;
                return Err(self.err("invalid number"));
            }
        }
        let int_end = i;
        let mut frac = (i, i);
        let mut float = false;
        // The integer and fraction digits as one integer, exact when they
        // are at most 15 digits together (the float fast path below).
        let mut digits_value = mag;
        if doc.get(i) == Some(&b'.') {
            float = true;
            i += 1;
            let digits = i;
            while let Some(&d @ b'0'..=b'9') = doc.get(i) {
                digits_value = digits_value
                    .wrapping_mul(10)
                    .wrapping_add(u64::from(d - b'0'));
                i += 1;
            }
            if i == digits {
                self.pos = i;
                return Err(self.err("invalid number: no digits after '.'"));
            }
            frac = (digits, i);
        }
        let mut exp = false;
        if let Some(b'e' | b'E') = doc.get(i) {
            float = true;
            exp = true;
            i += 1;
            if let Some(b'+' | b'-') = doc.get(i) {
                i += 1;
            }
            let digits = i;
            while let Some(b'0'..=b'9') = doc.get(i) {
                i += 1;
            }
            if i == digits {
                self.pos = i;
                return Err(self.err("invalid number: no digits in the exponent"));
            }
        }
        self.pos = i;
        // Fast paths: an integer that fits i64, and a float of at most 15
        // digits without exponent (its digits as an integer, below 2^53,
        // and the power of ten are exact doubles, so their quotient is the
        // correctly rounded value, as parsing gives it).
        if !float && !overflow {
            if !neg && mag <= i64::MAX as u64 {
                return Ok((Kind::Int, mag));
            }
            if neg && mag <= 1 << 63 {
                return Ok((Kind::Int, (mag as i64).wrapping_neg() as u64));
            }
        }
        if float && !exp && (int_end - int_start) + (frac.1 - frac.0) <= 15 {
            // At most 15 digits: no wrapping happened above, and the
            // value is below 10^15 < 2^53.
            let f = digits_value as f64 / POW10[frac.1 - frac.0];
            return Ok((Kind::Float, if neg { -f } else { f }.to_bits()));
        }
        let mut parsed = None;
        if !exp {
            // A number float64 can't be trusted to hold exactly (integers
            // beyond i64, more than 15 significant digits) is a decimal
            // when it has at most 38 digits.
            let int_digits = doc[int_start..int_end]
                .iter()
                .skip_while(|&&d| d == b'0')
                .count();
            let frac_digits = frac.1 - frac.0;
            let big_int =
                !float && (overflow || (neg && mag > 1 << 63) || (!neg && mag > i64::MAX as u64));
            let inexact = float && {
                let raw = &doc[start..i];
                // SAFETY: only ASCII digits, a sign and '.' were matched.
                let text = unsafe { std::str::from_utf8_unchecked(raw) };
                let sig = doc[int_start..int_end]
                    .iter()
                    .chain(&doc[frac.0..frac.1])
                    .skip_while(|&&d| d == b'0')
                    .count();
                // Up to 15 significant digits always round-trip.
                sig > 15 && {
                    let p = text.parse::<f64>();
                    let ok = p.as_ref().is_ok_and(|&f| {
                        f.is_finite()
                            && roundtrips(&doc[int_start..int_end], &doc[frac.0..frac.1], f)
                    });
                    parsed = Some(p);
                    !ok
                }
            };
            if big_int || inexact {
                if int_digits + frac_digits <= 38 {
                    return Ok((Kind::Decimal, decimal_shape(frac_digits, int_digits)));
                }
                return Ok((Kind::BigNum, 0));
            }
        }
        if !float {
            if overflow {
                return Ok((Kind::BigNum, 0));
            }
            let v = if neg {
                if mag > 1 << 63 {
                    return Ok((Kind::BigNum, 0));
                }
                (mag as i64).wrapping_neg()
            } else {
                match i64::try_from(mag) {
                    Ok(v) => v,
                    Err(_) => return Ok((Kind::BigNum, 0)),
                }
            };
            return Ok((Kind::Int, v as u64));
        }
        let raw = &doc[start..i];
        debug_assert!(raw.is_ascii());
        // SAFETY: the span holds only ASCII digits, signs, '.' and 'e'/'E',
        // as matched above.
        let text = unsafe { std::str::from_utf8_unchecked(raw) };
        match parsed.unwrap_or_else(|| text.parse::<f64>()) {
            Ok(f) if f.is_finite() => Ok((Kind::Float, f.to_bits())),
            Ok(_) => Ok((Kind::BigNum, 0)),
            Err(_) => Err(self.err("invalid number")),
        }
    }

    /// The rejection of a document whose first byte `first` does not
    /// open an object: what it is, when it is JSON of another kind, else
    /// where it stops being JSON (its first byte alone says neither:
    /// `nope` is no null, `[1` no array). Only rejected documents pay for
    /// the second look.
    #[cold]
    fn not_an_object(&mut self, first: Option<u8>, arena: &mut Vec<u8>) -> Reject {
        if first.is_none() {
            return Reject::parse("document is not a JSON object: found an empty document");
        }
        let mark = arena.len();
        let r = self.skip_value(1, arena);
        arena.truncate(mark);
        match r {
            Err(e) if e.reason == Reason::TooDeep => Reject::parse(format!(
                "document is not a JSON object: found {} nested deeper than {MAX_DEPTH} levels",
                describe(first)
            )),
            Err(e) => e,
            Ok(()) => {
                self.ws();
                if self.pos != self.doc.len() {
                    return self.err("trailing characters after the document");
                }
                Reject::parse(format!(
                    "document is not a JSON object: found {}",
                    describe(first)
                ))
            }
        }
    }

    /// Validates and skips any value; containers open level `depth`.
    fn skip_value(&mut self, depth: usize, arena: &mut Vec<u8>) -> Result<(), Reject> {
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                self.skip_string(arena)
            }
            Some(b'-' | b'0'..=b'9') => self.number().map(|_| ()),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(open @ (b'{' | b'[')) => {
                if depth > MAX_DEPTH {
                    return Err(Reject::new(
                        Reason::TooDeep,
                        format!(
                            "nesting deeper than {MAX_DEPTH} levels at byte {}",
                            self.pos
                        ),
                    ));
                }
                let object = open == b'{';
                let close = if object { b'}' } else { b']' };
                self.pos += 1;
                self.ws();
                if self.peek() == Some(close) {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    if object {
                        if self.peek() != Some(b'"') {
                            return Err(self.err("expected a field name"));
                        }
                        self.pos += 1;
                        self.skip_string(arena)?;
                        self.ws();
                        if self.peek() != Some(b':') {
                            return Err(self.err("expected ':' after a field name"));
                        }
                        self.pos += 1;
                        self.ws();
                    }
                    self.skip_value(depth + 1, arena)?;
                    self.ws();
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            self.ws();
                        }
                        Some(c) if c == close => {
                            self.pos += 1;
                            return Ok(());
                        }
                        _ => {
                            return Err(self.err(if object {
                                "expected ',' or '}' in an object"
                            } else {
                                "expected ',' or ']' in an array"
                            }));
                        }
                    }
                }
            }
            _ => Err(self.err("expected a value")),
        }
    }
}

fn hex4(b: &[u8]) -> Option<u32> {
    if b.len() < 4 {
        return None;
    }
    let mut v = 0u32;
    for &c in &b[..4] {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = v << 4 | u32::from(d);
    }
    Some(v)
}

/// Appends the unescaped form of a string's content (between the quotes,
/// already scanned by [`Scanner::string`]) to `out`. Rejects invalid escapes
/// and unpaired surrogates, as serde_json does.
pub fn unescape(src: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    let mut i = 0;
    while i < src.len() {
        let run = src[i..]
            .iter()
            .position(|&b| b == b'\\')
            .map_or(src.len(), |p| i + p);
        out.extend_from_slice(&src[i..run]);
        i = run;
        if i >= src.len() {
            break;
        }
        let Some(&e) = src.get(i + 1) else {
            return Err("invalid escape");
        };
        i += 2;
        let c = match e {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hi = hex4(&src[i..]).ok_or("invalid \\u escape")?;
                i += 4;
                let cp = match hi {
                    0xD800..=0xDBFF => {
                        if src.get(i) != Some(&b'\\') || src.get(i + 1) != Some(&b'u') {
                            return Err("lone leading surrogate in a \\u escape");
                        }
                        let lo = hex4(&src[i + 2..]).ok_or("invalid \\u escape")?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err("lone leading surrogate in a \\u escape");
                        }
                        i += 6;
                        0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err("lone trailing surrogate in a \\u escape"),
                    cp => cp,
                };
                let ch = char::from_u32(cp).ok_or("invalid \\u escape")?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            _ => return Err("invalid escape"),
        };
        out.push(c);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn normal_agrees_with_its_definition() {
        // The definition: strip leading and trailing zeros of int ‖ frac.
        fn reference(int: &[u8], frac: &[u8], exp: i64) -> Option<(Vec<u8>, i64)> {
            let all: Vec<u8> = int.iter().chain(frac).copied().collect();
            let lead = all.iter().take_while(|&&d| d == b'0').count();
            if lead == all.len() {
                return Some((Vec::new(), 0));
            }
            let trail = all.iter().rev().take_while(|&&d| d == b'0').count();
            let digits = all[lead..all.len() - trail].to_vec();
            (digits.len() <= 24).then(|| (digits, int.len() as i64 - 1 - lead as i64 + exp))
        }
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 30) as usize;
            // Mostly zeros, so runs of them lead and trail.
            let digits: Vec<u8> = (0..len)
                .map(|k| match (x >> (k % 60)) & 7 {
                    0..=4 => b'0',
                    d => b'0' + d as u8,
                })
                .collect();
            let split = if len == 0 {
                0
            } else {
                (x >> 32) as usize % (len + 1)
            };
            let (int, frac) = digits.split_at(split);
            let mut out = [0u8; 24];
            let got = normal(int, frac, 3, &mut out).map(|(n, e)| (out[..n].to_vec(), e));
            assert_eq!(got, reference(int, frac, 3), "{int:?} {frac:?}");
        }
    }

    #[test]
    fn short_floats_parse_like_the_standard_library() {
        struct Sink(Vec<u64>);
        impl FieldSink for Sink {
            fn field(&mut self, _: &str, v: Value) -> Result<(), Reject> {
                assert_eq!(v.kind, Kind::Float);
                self.0.push(v.num);
                Ok(())
            }
        }
        let mut texts: Vec<String> = [
            "0.0",
            "-0.0",
            "0.1",
            "0.2",
            "0.3",
            "-1.5",
            "123456789.012345",
            "0.000000000000001",
            "99999999999999.9",
            "1.7976931348623",
            "900719925474.099",
            "0.5e1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Pseudo-random numbers of 2 to 15 digits (more are decimals),
        // split anywhere.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = format!("{:02}", x % 10u64.pow(2 + (x % 14) as u32));
            let split = 1 + (x >> 40) as usize % digits.len().max(1);
            let (a, b) = digits.split_at(split.min(digits.len() - 1).max(1));
            texts.push(format!("{}{a}.{b}", if x & 1 == 1 { "-" } else { "" }));
        }
        for t in texts {
            let doc = format!(r#"{{"f":{t}}}"#);
            let mut sink = Sink(Vec::new());
            scan_object(doc.as_bytes(), &mut Vec::new(), &mut Vec::new(), &mut sink).unwrap();
            let want = t.parse::<f64>().unwrap().to_bits();
            assert_eq!(sink.0, [want], "{t}");
        }
    }

    #[test]
    fn skip_plain_finds_the_first_stop_byte() {
        // Every byte value at every position of a 0..=19-byte run of plain
        // bytes, with plain bytes after it: the SWAR scan agrees with the
        // table.
        for len in 0..40 {
            for b in 0..=255u8 {
                for tail in [0usize, 1, 9] {
                    let mut doc = vec![b'a'; len];
                    doc.push(b);
                    doc.extend(std::iter::repeat_n(b'z', tail));
                    let want = doc
                        .iter()
                        .position(|&c| STRING_STOP[c as usize])
                        .unwrap_or(doc.len());
                    assert_eq!(
                        skip_plain::<true>(&doc, 0),
                        want,
                        "len {len} byte {b:#x} tail {tail}"
                    );
                    let want = doc
                        .iter()
                        .position(|&c| STRING_STOP[c as usize] && c < 0x80)
                        .unwrap_or(doc.len());
                    assert_eq!(
                        skip_plain::<false>(&doc, 0),
                        want,
                        "len {len} byte {b:#x} tail {tail}"
                    );
                }
            }
        }
        // Two stop bytes in one word: the first wins.
        assert_eq!(skip_plain::<true>(b"ab\\\x01\"cdefgh", 0), 2);
        assert_eq!(skip_plain::<true>(b"ab\x01\x00\"\\cdefgh", 0), 2);
        assert_eq!(skip_plain::<true>(b"abcdefghij\"", 3), 10);
        assert_eq!(skip_plain::<true>("aé\"".as_bytes(), 0), 1);
        assert_eq!(skip_plain::<false>("aéééé\"".as_bytes(), 0), 9);
    }

    use super::*;

    #[derive(Default)]
    struct Collect(Vec<(String, Value)>);

    impl FieldSink for Collect {
        fn field(&mut self, key: &str, value: Value) -> Result<(), Reject> {
            self.0.push((key.to_string(), value));
            Ok(())
        }
    }

    type Fields = Vec<(String, Value)>;

    fn scan(doc: &str) -> Result<(Fields, Vec<u8>), Reject> {
        let mut c = Collect::default();
        let mut arena = Vec::new();
        scan_object(doc.as_bytes(), &mut Vec::new(), &mut arena, &mut c)?;
        Ok((c.0, arena))
    }

    /// A sink that guesses each next key from a list, as RowSink does.
    struct Guess {
        keys: Vec<&'static str>,
        next: usize,
        got: Vec<(String, Value, bool)>,
    }

    impl FieldSink for Guess {
        fn field(&mut self, key: &str, value: Value) -> Result<(), Reject> {
            self.got.push((key.to_string(), value, false));
            self.next += 1;
            Ok(())
        }
        fn likely_key(&self) -> &str {
            self.keys.get(self.next).copied().unwrap_or("")
        }
        fn likely_field(&mut self, key: &str, value: Value) -> Result<(), Reject> {
            self.got.push((key.to_string(), value, true));
            self.next += 1;
            Ok(())
        }
    }

    #[test]
    fn likely_keys_match_in_place() {
        let mut g = Guess {
            keys: vec!["a", "bé", "c", "dd"],
            next: 0,
            got: Vec::new(),
        };
        // "bé" matches its raw bytes; "\u0063" is "c" but escaped (scanned);
        // "d" is a prefix of the guess "dd" (scanned).
        let doc = r#"{"a":1,"bé":2,"\u0063":3,"d":4}"#;
        scan_object(doc.as_bytes(), &mut Vec::new(), &mut Vec::new(), &mut g).unwrap();
        let got: Vec<(&str, bool)> = g.got.iter().map(|(k, _, l)| (k.as_str(), *l)).collect();
        assert_eq!(
            got,
            vec![("a", true), ("bé", true), ("c", false), ("d", false)]
        );
        let plain = scan(doc).unwrap().0;
        for ((k1, v1, _), (k2, v2)) in g.got.iter().zip(&plain) {
            assert_eq!((k1, v1), (k2, v2));
        }
        // A guess that matches a prefix of a longer key does not match.
        let mut g = Guess {
            keys: vec!["ab"],
            next: 0,
            got: Vec::new(),
        };
        scan_object(br#"{"abc":1}"#, &mut Vec::new(), &mut Vec::new(), &mut g).unwrap();
        assert_eq!(g.got[0].0, "abc");
        assert!(!g.got[0].2);
        // Errors after a matched key are the same as after a scanned one.
        for doc in [r#"{"a" 1}"#, r#"{"a":}"#, r#"{"a":1 "#, r#"{"a":1,}"#] {
            let mut g = Guess {
                keys: vec!["a"],
                next: 0,
                got: Vec::new(),
            };
            let e1 = scan_object(doc.as_bytes(), &mut Vec::new(), &mut Vec::new(), &mut g);
            assert_eq!(e1.err(), scan(doc).err(), "{doc}");
        }
        assert!(plain_key("a b/é"));
        assert!(!plain_key("a\"b"));
        assert!(!plain_key("a\\b"));
        assert!(!plain_key("a\nb"));
    }

    #[test]
    fn number_fast_agrees_with_number() {
        let cases = [
            "0",
            "-0",
            "7",
            "-7",
            "123456789012345",
            "1234567890123456",
            "-999999999999999",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "0.5",
            "-0.5",
            "0.0",
            "1.25",
            "234.25",
            "12345678901234.5",
            "1234567890123.45",
            "123456789012345.6",
            "0.1234567890123456",
            "1e5",
            "1.5e3",
            "1.5E-3",
            "-0e0",
            "01",
            "1.",
            "-",
            "-a",
            ".5",
            "1.2.3",
            "00.5",
            "5.000000000000001",
            "100000000000000000000",
            "3.14159",
            "1.7976931348623157",
        ];
        for c in cases {
            for tail in ["", ",", "}", " "] {
                let t = format!("{c}{tail}");
                let mut a = Scanner {
                    doc: t.as_bytes(),
                    pos: 0,
                };
                let mut b = Scanner {
                    doc: t.as_bytes(),
                    pos: 0,
                };
                let ra = a.number_fast();
                let rb = b.number();
                assert_eq!(ra, rb, "{t:?}");
                assert_eq!(a.pos, b.pos, "{t:?}");
            }
        }
    }

    #[test]
    fn classifies_values() {
        let doc = r#" {"a":1,"b":-2.5,"c":"x\ny","d":true,"e":null,"f":[1,{"g":2}],"h":99999999999999999999,"i":1e999,"j":"plain","\u0041":false} "#;
        let (fields, arena) = scan(doc).unwrap();
        let kinds: Vec<(&str, Kind)> = fields.iter().map(|(k, v)| (k.as_str(), v.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("a", Kind::Int),
                ("b", Kind::Float),
                ("c", Kind::Text),
                ("d", Kind::Bool),
                ("e", Kind::Null),
                ("f", Kind::Nested),
                ("h", Kind::Decimal),
                ("i", Kind::BigNum),
                ("j", Kind::Text),
                ("A", Kind::Bool),
            ]
        );
        assert_eq!(fields[0].1.num as i64, 1);
        assert_eq!(f64::from_bits(fields[1].1.num), -2.5);
        let c = fields[2].1;
        assert!(c.in_arena);
        assert_eq!(&arena[c.start..c.end], b"x\ny");
        let f = fields[5].1;
        assert_eq!(&doc[f.start..f.end], r#"[1,{"g":2}]"#);
        let h = fields[6].1;
        assert_eq!(&doc[h.start..h.end], "99999999999999999999");
        let j = fields[8].1;
        assert!(!j.in_arena);
        assert_eq!(&doc[j.start..j.end], "plain");
    }

    #[test]
    fn integer_limits() {
        let (f, _) = scan(r#"{"a":9223372036854775807,"b":-9223372036854775808,"c":9223372036854775808,"d":-9223372036854775809,"e":-0}"#).unwrap();
        assert_eq!(f[0].1.kind, Kind::Int);
        assert_eq!(f[0].1.num as i64, i64::MAX);
        assert_eq!(f[1].1.kind, Kind::Int);
        assert_eq!(f[1].1.num as i64, i64::MIN);
        assert_eq!(f[2].1.kind, Kind::Decimal);
        assert_eq!(f[2].1.num, decimal_shape(0, 19));
        assert_eq!(f[3].1.kind, Kind::Decimal);
        assert_eq!(f[4].1.kind, Kind::Int);
        // Twenty digits and more: past u64 or not, decimals.
        let (f, _) = scan(r#"{"a":18446744073709551615,"b":18446744073709551616,"c":-99999999999999999999,"d":1000000000000000000,"e":12345678901234567890123}"#).unwrap();
        let k: Vec<(Kind, u64)> = f.iter().map(|(_, v)| (v.kind, v.num)).collect();
        assert_eq!(k[0], (Kind::Decimal, decimal_shape(0, 20)));
        assert_eq!(k[1], (Kind::Decimal, decimal_shape(0, 20)));
        assert_eq!(k[2], (Kind::Decimal, decimal_shape(0, 20)));
        assert_eq!(k[3], (Kind::Int, 1_000_000_000_000_000_000));
        assert_eq!(k[4], (Kind::Decimal, decimal_shape(0, 23)));
    }

    #[test]
    fn decimals() {
        let (f, _) = scan(
            r#"{"a":1.2345678901234567123,"b":0.000000000000000001,"c":123456789012345.6,"d":1.5,"e":1234567890123456789012345678901234567890,"f":1.23456789012345678e5,"g":-0.1000000000000000000}"#,
        )
        .unwrap();
        let k: Vec<(Kind, u64)> = f.iter().map(|(_, v)| (v.kind, v.num)).collect();
        assert_eq!(k[0], (Kind::Decimal, decimal_shape(19, 1)));
        // Shortest float64 texts (what Go, JS and Rust print) stay floats.
        let (f, _) =
            scan(r#"{"a":0.6046602879796196,"b":9007199254740993.0,"c":0.30000000000000004}"#)
                .unwrap();
        assert_eq!(f[0].1.kind, Kind::Float);
        assert_eq!(f[1].1.kind, Kind::Decimal, "2^53+1 is not a float64");
        assert_eq!(f[2].1.kind, Kind::Float);
        assert_eq!(k[1].0, Kind::Float, "one significant digit");
        assert_eq!(
            k[2].0,
            Kind::Float,
            "16 significant digits, but a float64's"
        );
        assert_eq!(k[3].0, Kind::Float);
        assert_eq!(k[4].0, Kind::BigNum, "over 38 digits");
        assert_eq!(k[5].0, Kind::Float, "exponents stay float");
        assert_eq!(k[6].0, Kind::Float, "trailing zeros do not count");
    }

    #[test]
    fn unicode_escapes() {
        let (f, arena) = scan(r#"{"a":"\u00e9\ud83d\ude00\/"}"#).unwrap();
        let v = f[0].1;
        assert_eq!(std::str::from_utf8(&arena[v.start..v.end]).unwrap(), "é😀/");
    }

    #[test]
    fn rejects_invalid_documents() {
        let cases = [
            ("", "empty document"),
            ("[1]", "found an array"),
            (
                "[1",
                "invalid JSON: unexpected end of document: expected ',' or ']' in an array",
            ),
            ("nope", "invalid JSON at byte 0: invalid literal"),
            ("\"s", "unterminated string"),
            ("5 6", "invalid JSON at byte 2: trailing characters"),
            ("\"s\"", "a string"),
            ("5", "a number"),
            ("null", "null"),
            ("{", "end of document"),
            ("{\"a\"}", "expected ':'"),
            ("{\"a\":}", "expected a value"),
            ("{\"a\":1,}", "expected a field name"),
            ("{\"a\":1}x", "trailing characters"),
            ("{\"a\":01}", "expected ',' or '}'"),
            ("{\"a\":1.}", "no digits after"),
            ("{\"a\":1e}", "no digits in the exponent"),
            ("{\"a\":-}", "invalid number"),
            ("{\"a\":tru}", "invalid literal"),
            ("{\"a\":\"\\x\"}", "invalid escape"),
            ("{\"a\":\"\\ud800\"}", "lone leading surrogate"),
            ("{\"a\":\"\\udc00\"}", "lone trailing surrogate"),
            ("{\"a\":[\"\\ud800\"]}", "lone leading surrogate"),
            ("{\"a\":\"x\ny\"}", "control character"),
            ("{\"a\":\"x", "unterminated string"),
            ("{\"a\":\"x\\", "unterminated string"),
            ("{\"a\":[1 2]}", "expected ',' or ']'"),
            ("{\"a\":{\"b\" 1}}", "expected ':'"),
            ("{\"a\":{1:2}}", "expected a field name"),
        ];
        for (doc, want) in cases {
            let err = scan(doc).expect_err(doc);
            assert_eq!(err.reason, Reason::Parse, "{doc}");
            assert!(
                err.detail.contains(want),
                "{doc:?}: {:?} lacks {want:?}",
                err.detail
            );
        }
        let mut c = Collect::default();
        let err = scan_object(
            b"{\"a\":\"\xff\"}",
            &mut Vec::new(),
            &mut Vec::new(),
            &mut c,
        )
        .unwrap_err();
        assert!(
            err.detail.contains("invalid UTF-8 in a string"),
            "{}",
            err.detail
        );
        for doc in [
            &b"{\"a\":1\xff}"[..],
            b"\xef\xbb\xbf{}",
            b"{\"\xc3\":1}",
            b"{\"a\":[\"\xed\xa0\x80\"]}",
        ] {
            assert!(
                scan_object(doc, &mut Vec::new(), &mut Vec::new(), &mut c).is_err(),
                "{doc:?}"
            );
        }
        // A bad or special byte at every position of a string, in a key
        // and in a value, across the 16- and 8-byte steps of the scan.
        for pos in 0..40 {
            let plain = "p".repeat(pos);
            for (mid, ok, want) in [
                (&b"\n"[..], false, "control character"),
                (b"\xff", false, "invalid UTF-8"),
                (b"\xc3", false, "invalid UTF-8"),
                (b"\x7f", true, "\x7f"),
                ("é".as_bytes(), true, "é"),
                (b"\\n", true, "\n"),
                (b"\\\"", true, "\""),
            ] {
                let mut text = plain.clone().into_bytes();
                text.extend_from_slice(mid);
                text.extend_from_slice(b"tail");
                for in_key in [false, true] {
                    let mut doc = b"{\"".to_vec();
                    if in_key {
                        doc.extend_from_slice(&text);
                        doc.extend_from_slice(b"\":1}");
                    } else {
                        doc.extend_from_slice(b"k\":\"");
                        doc.extend_from_slice(&text);
                        doc.extend_from_slice(b"\"}");
                    }
                    let mut c = Collect::default();
                    let mut arena = Vec::new();
                    let r = scan_object(&doc, &mut Vec::new(), &mut arena, &mut c);
                    match r {
                        Ok(()) => {
                            assert!(ok, "{doc:?} accepted");
                            let (k, v) = &c.0[0];
                            let got = if in_key {
                                k.clone()
                            } else {
                                let src = if v.in_arena { &arena[..] } else { &doc[..] };
                                String::from_utf8(src[v.start..v.end].to_vec()).unwrap()
                            };
                            assert_eq!(got, format!("{plain}{want}tail"), "{doc:?}");
                        }
                        Err(e) => {
                            assert!(!ok, "{doc:?}: {}", e.detail);
                            assert!(e.detail.contains(want), "{doc:?}: {}", e.detail);
                        }
                    }
                }
            }
        }
        let (f, _) = scan("{\"é\":\"ü😀\"}").unwrap();
        assert_eq!(f[0].0, "é");
    }

    #[test]
    fn depth_limit() {
        let ok = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        scan(&ok).unwrap();
        let deep = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert_eq!(scan(&deep).unwrap_err().reason, Reason::TooDeep);
        let very = format!("{{\"a\":{}", "[".repeat(100_000));
        assert_eq!(scan(&very).unwrap_err().reason, Reason::TooDeep);
    }

    #[test]
    fn agrees_with_serde_json_on_validity() {
        let docs = [
            r#"{"a":[1,2,{"b":null}],"c":"\u00e9"}"#,
            r#"{"a":1 , "b" : [ ] , "c":{ } }"#,
            r#"{"a":1e5,"b":-0.0e-3,"c":0}"#,
            r#"{"a":"\t"}"#,
            r#"{"a":"	"}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":.5}"#,
            r#"{"a":+1}"#,
            r#"{"a":NaN}"#,
            r#"{"a":1}{"b":2}"#,
        ];
        for doc in docs {
            let ours = scan(doc).is_ok();
            let theirs =
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(doc).is_ok();
            assert_eq!(ours, theirs, "{doc}");
        }
    }
}
