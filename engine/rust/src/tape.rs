//! A push's nested values as a flat tape of nodes, parsed from the payload
//! text that [`crate::json::scan_object`] already validated.
//!
//! The tape is cleared, not freed, between pushes, so the nested path does
//! not allocate per row in steady state: strings point into the payload
//! (or, unescaped, into the tape's own byte arena), a value whose shape
//! fits its column's tree is checked in place ([`Tape::fits`]), and only a
//! value that widens the tree is typed into a [`JType`] ([`Tape::infer`]).
//!
//! Everything here reproduces `serde_json::Value` (with
//! `arbitrary_precision`) followed by [`JType::of`] and
//! [`crate::nested::build`]: objects keep the last of duplicate keys,
//! members are ordered by key, numbers keep their text.

use serde_json::Value;

use crate::nested::{JType, MAX_NESTED_DEPTH, too_precise};
use crate::quarantine::Reject;

#[path = "tape_build.rs"]
mod build;
pub use build::build;

/// No value: a row without one, or a struct field a row lacks.
pub const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    Null,
    Bool,
    /// A number that is an i64.
    Int,
    /// A number that is exactly a finite float64.
    Float,
    /// Any other number (utf8 by [`JType::of`]).
    Num,
    Str,
    Arr,
    Obj,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    tag: Tag,
    /// The span is in [`Tape::strs`] rather than in the source buffer.
    in_arena: bool,
    /// Str: the unescaped content; numbers: their text. Unused otherwise.
    start: u32,
    end: u32,
    /// Bool: 0 or 1; Int: i64 bits; Float: f64 bits; Arr: elements;
    /// Obj: members (each a Str key node followed by its value).
    num: u64,
    /// The index just after this node's subtree.
    next: u32,
}

/// The nested values of one push. See the module doc.
#[derive(Default)]
pub struct Tape {
    nodes: Vec<Node>,
    strs: Vec<u8>,
    /// Scratch for sorting object members when writing JSON text.
    order: Vec<u32>,
}

/// A position to truncate back to (a rejected document's values).
#[derive(Clone, Copy)]
pub struct Mark(usize, usize);

/// The keys serde_json's `Value` deserializer (with `arbitrary_precision`
/// and `raw_value`) treats specially when they come first in an object.
const SERDE_TOKENS: [&[u8]; 2] = [
    b"$serde_json::private::Number",
    b"$serde_json::private::RawValue",
];

/// The tape cannot reproduce serde_json here (see [`SERDE_TOKENS`]).
struct Fallback;

impl Tape {
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.strs.clear();
    }

    pub fn mark(&self) -> Mark {
        Mark(self.nodes.len(), self.strs.len())
    }

    pub fn truncate(&mut self, m: Mark) {
        self.nodes.truncate(m.0);
        self.strs.truncate(m.1);
    }

    /// Appends the value `src[start..end]`, a nested value of a document
    /// that `json::scan_object` accepted, and returns its node.
    pub fn push(&mut self, src: &[u8], start: usize, end: usize) -> Result<u32, Reject> {
        let text = src
            .get(start..end)
            .ok_or_else(|| Reject::parse("nested value outside the payload"))?;
        if end > u32::MAX as usize || self.nodes.len() >= (u32::MAX - 1) as usize {
            return Err(Reject::parse("nested values over 2^32 bytes in one push"));
        }
        let mark = self.mark();
        let root = self.nodes.len() as u32;
        let mut p = Parser { src, pos: start };
        match p.value(self) {
            Ok(()) if p.pos == end => Ok(root),
            Ok(()) => {
                self.truncate(mark);
                Err(Reject::parse("nested value: trailing characters"))
            }
            Err(Ok(r)) => {
                self.truncate(mark);
                Err(r)
            }
            Err(Err(Fallback)) => {
                self.truncate(mark);
                let v: Value = serde_json::from_slice(text)
                    .map_err(|e| Reject::parse(format!("nested value: {e}")))?;
                self.push_value(&v);
                Ok(root)
            }
        }
    }

    fn node(&mut self, tag: Tag, in_arena: bool, start: usize, end: usize, num: u64) -> usize {
        let i = self.nodes.len();
        self.nodes.push(Node {
            tag,
            in_arena,
            start: start as u32,
            end: end as u32,
            num,
            next: i as u32 + 1,
        });
        i
    }

    fn close(&mut self, i: usize, count: u64) {
        let next = self.nodes.len() as u32;
        let n = &mut self.nodes[i];
        n.num = count;
        n.next = next;
    }

    fn push_str(&mut self, s: &[u8]) {
        let a = self.strs.len();
        self.strs.extend_from_slice(s);
        self.node(Tag::Str, true, a, self.strs.len(), 0);
    }

    /// Appends a parsed value (the rare [`SERDE_TOKENS`] case).
    fn push_value(&mut self, v: &Value) {
        match v {
            Value::Null => {
                self.node(Tag::Null, false, 0, 0, 0);
            }
            Value::Bool(b) => {
                self.node(Tag::Bool, false, 0, 0, u64::from(*b));
            }
            Value::Number(n) => {
                let text = n.to_string();
                let (tag, num) = classify(&text);
                let a = self.strs.len();
                self.strs.extend_from_slice(text.as_bytes());
                self.node(tag, true, a, self.strs.len(), num);
            }
            Value::String(s) => self.push_str(s.as_bytes()),
            Value::Array(a) => {
                let i = self.node(Tag::Arr, false, 0, 0, 0);
                a.iter().for_each(|e| self.push_value(e));
                self.close(i, a.len() as u64);
            }
            Value::Object(m) => {
                let i = self.node(Tag::Obj, false, 0, 0, 0);
                for (k, e) in m {
                    self.push_str(k.as_bytes());
                    self.push_value(e);
                }
                self.close(i, m.len() as u64);
            }
        }
    }

    #[inline]
    fn bytes<'a>(&'a self, src: &'a [u8], n: &Node) -> &'a [u8] {
        let buf = if n.in_arena { &self.strs[..] } else { src };
        buf.get(n.start as usize..n.end as usize).unwrap_or(&[])
    }

    /// The members of object node `i`: (key node, value node).
    fn members(&self, i: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let count = self.nodes[i as usize].num;
        let mut j = i + 1;
        (0..count).map(move |_| {
            let k = j;
            j = self.nodes[k as usize + 1].next;
            (k, k + 1)
        })
    }

    /// The elements of array node `i`.
    fn elements(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        let count = self.nodes[i as usize].num;
        let mut j = i + 1;
        (0..count).map(move |_| {
            let e = j;
            j = self.nodes[e as usize].next;
            e
        })
    }

    /// Whether node `i` (at nesting level `depth`) widens nothing in `t`,
    /// i.e. `t.join(&JType::of(value, depth)) == *t`. May answer false for
    /// a value that fits (a duplicate key's earlier value, fields out of
    /// order): callers then take the exact path.
    pub fn fits(&self, src: &[u8], t: &JType, i: u32, depth: usize) -> bool {
        let n = &self.nodes[i as usize];
        if n.tag == Tag::Null || *t == JType::Utf8 {
            return true;
        }
        match n.tag {
            Tag::Bool => *t == JType::Bool,
            Tag::Int => matches!(t, JType::Int64 | JType::Float64),
            Tag::Float => *t == JType::Float64,
            Tag::Null | Tag::Num | Tag::Str => false,
            _ if depth > MAX_NESTED_DEPTH => false,
            Tag::Arr => match t {
                JType::List(e) => self.elements(i).all(|c| self.fits(src, e, c, depth + 1)),
                _ => false,
            },
            Tag::Obj => match t {
                JType::Struct(f) => self.members(i).all(|(k, v)| {
                    let key = self.bytes(src, &self.nodes[k as usize]);
                    f.binary_search_by(|(name, _)| cmp_key(name.as_bytes(), key))
                        .is_ok_and(|fi| self.fits(src, &f[fi].1, v, depth + 1))
                }),
                _ => false,
            },
        }
    }

    /// Whether node `i` (at nesting level `depth`), a value of a column
    /// whose shape [`JType::writable`] cut down to `t`, has a value other
    /// than null where `t` left a position out: building `t` would lose
    /// it.
    pub fn lost(&self, src: &[u8], t: &JType, i: u32, depth: usize) -> bool {
        let n = &self.nodes[i as usize];
        if n.tag == Tag::Null || depth > MAX_NESTED_DEPTH {
            return false;
        }
        match (t, n.tag) {
            (JType::List(e), Tag::Arr) => self.elements(i).any(|c| self.lost(src, e, c, depth + 1)),
            (JType::Struct(f), Tag::Obj) => self.members(i).any(|(k, v)| {
                let key = self.bytes(src, &self.nodes[k as usize]);
                match f.iter().find(|(name, _)| key_eq(name.as_bytes(), key)) {
                    Some((_, ft)) => self.lost(src, ft, v, depth + 1),
                    None => self.nodes[v as usize].tag != Tag::Null,
                }
            }),
            // An empty object where the struct kept fields: nothing to lose.
            // Any other pair: the value is of the position's type, or text.
            _ => false,
        }
    }

    /// `JType::of` of node `i` at nesting level `depth`.
    pub fn infer(&self, src: &[u8], i: u32, depth: usize) -> JType {
        let n = &self.nodes[i as usize];
        match n.tag {
            Tag::Null => JType::Null,
            Tag::Bool => JType::Bool,
            Tag::Int => JType::Int64,
            Tag::Float => JType::Float64,
            Tag::Num | Tag::Str => JType::Utf8,
            _ if depth > MAX_NESTED_DEPTH => JType::Utf8,
            Tag::Arr => JType::List(Box::new(
                self.elements(i)
                    .fold(JType::Null, |t, e| t.join(&self.infer(src, e, depth + 1))),
            )),
            Tag::Obj => {
                let mut f: Vec<(String, JType)> = Vec::with_capacity(n.num as usize);
                for (k, v) in self.members(i) {
                    let key = String::from_utf8_lossy(self.bytes(src, &self.nodes[k as usize]));
                    f.push((key.into_owned(), self.infer(src, v, depth + 1)));
                }
                // Stable: among duplicate keys the last (serde_json's) wins.
                f.sort_by(|a, b| a.0.cmp(&b.0));
                let mut out: Vec<(String, JType)> = Vec::with_capacity(f.len());
                for p in f {
                    match out.last_mut() {
                        Some(last) if last.0 == p.0 => *last = p,
                        _ => out.push(p),
                    }
                }
                JType::struct_of(out)
            }
        }
    }

    /// Appends node `i` as compact JSON text, as serde_json writes a
    /// `Value`: keys sorted and unique, numbers as their text.
    fn write_json(&mut self, src: &[u8], i: u32, out: &mut Vec<u8>) {
        let n = self.nodes[i as usize];
        match n.tag {
            Tag::Null => out.extend_from_slice(b"null"),
            Tag::Bool => out.extend_from_slice(if n.num != 0 { b"true" } else { b"false" }),
            // A number as the document has it, as a top-level utf8 column
            // keeps it (`1e400`, not serde_json's `1e+400`).
            Tag::Int | Tag::Float | Tag::Num => out.extend_from_slice(self.bytes(src, &n)),
            Tag::Str => escape(self.bytes(src, &n), out),
            Tag::Arr => {
                out.push(b'[');
                let mut j = i + 1;
                for e in 0..n.num {
                    if e > 0 {
                        out.push(b',');
                    }
                    self.write_json(src, j, out);
                    j = self.nodes[j as usize].next;
                }
                out.push(b']');
            }
            Tag::Obj => {
                let mark = self.order.len();
                let mut j = i + 1;
                for _ in 0..n.num {
                    self.order.push(j);
                    j = self.nodes[j as usize + 1].next;
                }
                let mut order = std::mem::take(&mut self.order);
                order[mark..].sort_by(|&a, &b| {
                    self.bytes(src, &self.nodes[a as usize])
                        .cmp(self.bytes(src, &self.nodes[b as usize]))
                });
                self.order = order;
                out.push(b'{');
                let end = self.order.len();
                let mut first = true;
                for x in mark..end {
                    let k = self.order[x];
                    let key = self.bytes(src, &self.nodes[k as usize]);
                    // Of equal keys (adjacent, in document order) the last wins.
                    if x + 1 < end
                        && self.bytes(src, &self.nodes[self.order[x + 1] as usize]) == key
                    {
                        continue;
                    }
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    escape(key, out);
                    out.push(b':');
                    self.write_json(src, k + 1, out);
                }
                self.order.truncate(mark);
                out.push(b'}');
            }
        }
    }
}

/// A number's node tag and bits, as serde_json's `Number` (with
/// `arbitrary_precision`) answers `as_i64`, `is_u64` and `as_f64`.
fn classify(text: &str) -> (Tag, u64) {
    if let Some(r) = classify_short(text.as_bytes()) {
        return r;
    }
    if let Ok(i) = text.parse::<i64>() {
        (Tag::Int, i as u64)
    } else if text.parse::<u64>().is_ok() {
        (Tag::Num, 0)
    } else {
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() && !too_precise(text) => (Tag::Float, f.to_bits()),
            _ => (Tag::Num, 0),
        }
    }
}

/// [`classify`] of the common number `-?digits(.digits)?` with at most 15
/// significant digits (so never too precise) and no exponent, without the
/// general parsers: an integer is exact in i64, and a fraction is the
/// correctly rounded quotient of two floats that hold their values exactly
/// (mantissa < 2^53, 10^k for k <= 22), the fast path of every exact
/// decimal-to-float conversion. `None` for anything else.
#[inline]
fn classify_short(t: &[u8]) -> Option<(Tag, u64)> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (neg, digits) = match t.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, t),
    };
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut m: u64 = 0;
    let mut frac: Option<usize> = None;
    for (i, &b) in digits.iter().enumerate() {
        match b {
            b'0'..=b'9' => m = m * 10 + u64::from(b - b'0'),
            b'.' if frac.is_none() => frac = Some(digits.len() - i - 1),
            _ => return None,
        }
    }
    match frac {
        None => {
            // At most 16 digits: well inside i64.
            let v = m as i64;
            Some((Tag::Int, (if neg { -v } else { v }) as u64))
        }
        Some(k) => {
            // At most 15 digits (16 bytes with the '.'), so m < 2^53.
            let f = m as f64 / POW10[k];
            Some((Tag::Float, (if neg { -f } else { f }).to_bits()))
        }
    }
}

/// Compares two keys bytewise, inline (keys are short; a libc memcmp
/// call per comparison dominated struct lookups).
#[inline]
fn cmp_key(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

#[inline]
fn key_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Writes a string's content quoted and escaped as serde_json does.
fn escape(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut run = 0;
    for (i, &b) in s.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&s[run..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        run = i + 1;
    }
    out.extend_from_slice(&s[run..]);
    out.push(b'"');
}

/// Parses validated JSON text into the tape. Errors are `Ok(reject)` for
/// text that is not valid after all (a bug upstream) or `Err(Fallback)`.
struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
}

type PResult = Result<(), Result<Reject, Fallback>>;

#[cold]
fn bad() -> Result<Reject, Fallback> {
    Ok(Reject::parse("nested value: invalid JSON"))
}

impl Parser<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    #[inline]
    fn expect(&mut self, b: u8) -> PResult {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(bad())
        }
    }

    /// A string whose opening quote is next; appends its Str node and
    /// returns the node's content.
    fn string(&mut self, tape: &mut Tape) -> PResult {
        self.expect(b'"')?;
        let start = self.pos;
        let mut i = start;
        let mut escaped = false;
        loop {
            match self.src.get(i) {
                None => return Err(bad()),
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    i += 2;
                }
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        if escaped {
            let a = tape.strs.len();
            if crate::json::unescape(&self.src[start..i], &mut tape.strs).is_err() {
                tape.strs.truncate(a);
                return Err(bad());
            }
            tape.node(Tag::Str, true, a, tape.strs.len(), 0);
        } else {
            tape.node(Tag::Str, false, start, i, 0);
        }
        Ok(())
    }

    fn literal(&mut self, lit: &[u8]) -> PResult {
        if self.src[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(bad())
        }
    }

    fn value(&mut self, tape: &mut Tape) -> PResult {
        self.ws();
        let start = self.pos;
        match self.peek() {
            Some(b'"') => return self.string(tape),
            Some(b'-' | b'0'..=b'9') => {
                let mut i = start + 1;
                while let Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') = self.src.get(i) {
                    i += 1;
                }
                self.pos = i;
                let raw = &self.src[start..i];
                let (tag, num) = match raw {
                    // The common small integer, without parsing twice.
                    [d @ b'0'..=b'9'] => (Tag::Int, u64::from(d - b'0')),
                    _ => {
                        debug_assert!(raw.is_ascii());
                        // SAFETY: only ASCII digits, signs, '.', 'e' and 'E'
                        // were matched.
                        classify(unsafe { std::str::from_utf8_unchecked(raw) })
                    }
                };
                tape.node(tag, false, start, i, num);
            }
            Some(b't') => {
                self.literal(b"true")?;
                tape.node(Tag::Bool, false, start, self.pos, 1);
            }
            Some(b'f') => {
                self.literal(b"false")?;
                tape.node(Tag::Bool, false, start, self.pos, 0);
            }
            Some(b'n') => {
                self.literal(b"null")?;
                tape.node(Tag::Null, false, start, self.pos, 0);
            }
            Some(b'[') => {
                self.pos += 1;
                let i = tape.node(Tag::Arr, false, start, start, 0);
                let mut count = 0u64;
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                } else {
                    loop {
                        self.value(tape)?;
                        count += 1;
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b']') => {
                                self.pos += 1;
                                break;
                            }
                            _ => return Err(bad()),
                        }
                    }
                }
                tape.close(i, count);
            }
            Some(b'{') => {
                self.pos += 1;
                let i = tape.node(Tag::Obj, false, start, start, 0);
                let mut count = 0u64;
                self.ws();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                } else {
                    loop {
                        self.ws();
                        self.string(tape)?;
                        if count == 0 {
                            let k = tape.nodes[tape.nodes.len() - 1];
                            let key = tape.bytes(self.src, &k);
                            if key.first() == Some(&b'$') && SERDE_TOKENS.contains(&key) {
                                return Err(Err(Fallback));
                            }
                        }
                        self.ws();
                        self.expect(b':')?;
                        self.value(tape)?;
                        count += 1;
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b'}') => {
                                self.pos += 1;
                                break;
                            }
                            _ => return Err(bad()),
                        }
                    }
                }
                tape.close(i, count);
            }
            _ => return Err(bad()),
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "tape_tests.rs"]
mod tests;
