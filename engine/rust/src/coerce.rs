//! Coercion of declared values: one value's text form (as the source
//! writes it) to the exact value of its [`Decl`]. A value that does not
//! parse as its type is a `type_conflict`; one that parses but does not fit
//! (overflow, more fractional digits than the scale, a date Arrow can't
//! hold, infinity) is `out_of_range`. Nothing is rounded or truncated.

use crate::decl::Decl;
use crate::quarantine::{Reason, Reject};

/// One coerced value. Text and bytes refer to the push's payload buffer or
/// arena by absolute offsets; a list's elements are `elems[start..end]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    Null,
    I(i64),
    U(u64),
    F(f64),
    D(i128),
    B(bool),
    Text { arena: bool, start: u32, end: u32 },
    Iv { months: i32, days: i32, nanos: i64 },
    Uuid(u128),
    List { start: u32, end: u32 },
}

/// Where a value's text lives: in the payload buffer at an absolute
/// offset, or in a scratch buffer (an unescaped array element) from which
/// text values are copied into the arena.
#[derive(Clone, Copy)]
pub enum Src {
    Payload(usize),
    Scratch,
}

fn conflict(what: &str) -> Reject {
    Reject::new(Reason::TypeConflict, format!("value is not a valid {what}"))
}

fn range(what: &str) -> Reject {
    Reject::new(
        Reason::OutOfRange,
        format!("value is out of range for {what}"),
    )
}

fn keep(text: &[u8], src: Src, arena: &mut Vec<u8>) -> Result<Val, Reject> {
    let too_big = || Reject::new(Reason::TooLarge, "a push's text is over 4 GiB");
    Ok(match src {
        Src::Payload(abs) => Val::Text {
            arena: false,
            start: u32::try_from(abs).map_err(|_| too_big())?,
            end: u32::try_from(abs + text.len()).map_err(|_| too_big())?,
        },
        Src::Scratch => {
            let start = arena.len();
            arena.extend_from_slice(text);
            Val::Text {
                arena: true,
                start: u32::try_from(start).map_err(|_| too_big())?,
                end: u32::try_from(arena.len()).map_err(|_| too_big())?,
            }
        }
    })
}

/// Coerces one non-null value.
pub fn coerce(
    decl: &Decl,
    text: &[u8],
    src: Src,
    arena: &mut Vec<u8>,
    elems: &mut Vec<Val>,
    scratch: &mut Vec<u8>,
) -> Result<Val, Reject> {
    Ok(match decl {
        Decl::Int8 => Val::I(int(text, i8::MIN as i64, i8::MAX as i64, "int8")?),
        Decl::Int16 => Val::I(int(text, i16::MIN as i64, i16::MAX as i64, "int16")?),
        Decl::Int32 => Val::I(int(text, i32::MIN as i64, i32::MAX as i64, "int32")?),
        Decl::Int64 => Val::I(int(text, i64::MIN, i64::MAX, "int64")?),
        Decl::UInt8 => Val::U(uint(text, u8::MAX as u64, "uint8")?),
        Decl::UInt16 => Val::U(uint(text, u16::MAX as u64, "uint16")?),
        Decl::UInt32 => Val::U(uint(text, u32::MAX as u64, "uint32")?),
        Decl::UInt64 => Val::U(uint(text, u64::MAX, "uint64")?),
        Decl::Float32 => {
            let s = ascii(text, "float32")?;
            let v: f32 = s.parse().map_err(|_| conflict("float32"))?;
            if v.is_infinite() && !is_inf_text(s) {
                return Err(range("float32"));
            }
            Val::F(f64::from(v))
        }
        Decl::Float64 => {
            let s = ascii(text, "float64")?;
            let v: f64 = s.parse().map_err(|_| conflict("float64"))?;
            if v.is_infinite() && !is_inf_text(s) {
                return Err(range("float64"));
            }
            Val::F(v)
        }
        Decl::Decimal { p, s, unsigned } => Val::D(decimal(text, *p, *s, *unsigned)?),
        Decl::NumericText => {
            let s = ascii(text, "numeric")?;
            if !(s == "NaN" || s == "Infinity" || s == "-Infinity") {
                decimal_parts(text).ok_or_else(|| conflict("numeric"))?;
            }
            keep(text, src, arena)?
        }
        Decl::Bool => Val::B(boolean(text)?),
        Decl::Utf8 | Decl::Enum => {
            std::str::from_utf8(text).map_err(|_| conflict("UTF-8 string"))?;
            keep(text, src, arena)?
        }
        Decl::Json => {
            serde_json::from_slice::<&serde_json::value::RawValue>(text)
                .map_err(|_| conflict("JSON text"))?;
            keep(text, src, arena)?
        }
        Decl::Binary { hex: false } => keep(text, src, arena)?,
        Decl::Binary { hex: true } => {
            let h = text
                .strip_prefix(b"\\x")
                .ok_or_else(|| conflict("bytea (hex format, \\x...)"))?;
            if h.len() % 2 != 0 {
                return Err(conflict("bytea (hex format, \\x...)"));
            }
            let start = arena.len();
            for pair in h.chunks_exact(2) {
                match (hexval(pair[0]), hexval(pair[1])) {
                    (Some(a), Some(b)) => arena.push(a << 4 | b),
                    _ => {
                        arena.truncate(start);
                        return Err(conflict("bytea (hex format, \\x...)"));
                    }
                }
            }
            Val::Text {
                arena: true,
                start: start as u32,
                end: arena.len() as u32,
            }
        }
        Decl::Date => {
            let mut c = Cur::new(text);
            let days = c.date()?;
            c.bc_suffix_date(days)?
        }
        Decl::Time => {
            let mut c = Cur::new(text);
            let us = c.time(false)?;
            c.end("time")?;
            Val::I(us)
        }
        Decl::TimeTz => {
            let mut c = Cur::new(text);
            c.time_of_day(true)?;
            c.offset()?.ok_or_else(|| conflict("timetz (no offset)"))?;
            c.end("timetz")?;
            keep(text, src, arena)?
        }
        Decl::Duration => {
            let mut c = Cur::new(text);
            let us = c.time(true)?;
            c.end("time")?;
            Val::I(us)
        }
        Decl::Timestamp | Decl::TimestampTz => {
            let tz = matches!(decl, Decl::TimestampTz);
            if text == b"infinity" || text == b"-infinity" {
                return Err(range("timestamp[us] (infinity)"));
            }
            let mut c = Cur::new(text);
            let ymd_days = c.date_raw()?;
            if !(c.eat(b' ') || c.eat(b'T')) {
                return Err(conflict("timestamp"));
            }
            let us = c.time(false)?;
            let off = c.offset()?;
            let bc = c.bc();
            c.end("timestamp")?;
            if off.is_some() && !tz {
                return Err(conflict("timestamp (has an offset; declare timestamptz)"));
            }
            let days = ymd_to_days(ymd_days.0, ymd_days.1, ymd_days.2, bc)?;
            let local = i128::from(days) * 86_400_000_000 + i128::from(us);
            // A timestamptz without an offset is taken as UTC (MySQL
            // TIMESTAMP values are UTC in the binlog).
            let utc = local - i128::from(off.unwrap_or(0)) * 1_000_000;
            Val::I(i64::try_from(utc).map_err(|_| range("timestamp[us]"))?)
        }
        Decl::Interval => interval(text)?,
        Decl::Uuid => {
            let mut v: u128 = 0;
            let mut n = 0;
            for (i, &b) in text.iter().enumerate() {
                if b == b'-' && text.len() == 36 && matches!(i, 8 | 13 | 18 | 23) {
                    continue;
                }
                let h = hexval(b).ok_or_else(|| conflict("uuid"))?;
                v = v << 4 | u128::from(h);
                n += 1;
            }
            if n != 32 || !(text.len() == 32 || text.len() == 36) {
                return Err(conflict("uuid"));
            }
            Val::Uuid(v)
        }
        Decl::List(elem) => array(elem, text, src, arena, elems, scratch)?,
    })
}

fn is_inf_text(s: &str) -> bool {
    let t = s.trim_start_matches(['+', '-']);
    t.eq_ignore_ascii_case("infinity") || t.eq_ignore_ascii_case("inf")
}

fn ascii<'a>(text: &'a [u8], what: &str) -> Result<&'a str, Reject> {
    if !text.is_ascii() {
        return Err(conflict(what));
    }
    // ASCII is UTF-8.
    std::str::from_utf8(text).map_err(|_| conflict(what))
}

fn hexval(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Parses an optionally signed decimal integer: conflict for bad text,
/// out of range for a valid integer outside [min, max].
fn int(text: &[u8], min: i64, max: i64, what: &str) -> Result<i64, Reject> {
    let (neg, digits) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(conflict(what));
    }
    let mut v: i128 = 0;
    for &d in digits {
        v = v * 10 + i128::from(d - b'0');
        if v > 1 << 64 {
            return Err(range(what));
        }
    }
    let v = if neg { -v } else { v };
    if v < i128::from(min) || v > i128::from(max) {
        return Err(range(what));
    }
    Ok(v as i64)
}

fn uint(text: &[u8], max: u64, what: &str) -> Result<u64, Reject> {
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if let Some(rest) = digits.strip_prefix(b"-") {
        if !rest.is_empty() && rest.iter().all(u8::is_ascii_digit) {
            if rest.iter().all(|&d| d == b'0') {
                return Ok(0);
            }
            return Err(range(what));
        }
        return Err(conflict(what));
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(conflict(what));
    }
    let mut v: u128 = 0;
    for &d in digits {
        v = v * 10 + u128::from(d - b'0');
        if v > u128::from(u64::MAX) {
            return Err(range(what));
        }
    }
    if v > u128::from(max) {
        return Err(range(what));
    }
    Ok(v as u64)
}

fn boolean(text: &[u8]) -> Result<bool, Reject> {
    let t = std::str::from_utf8(text).map_err(|_| conflict("bool"))?;
    match t.to_ascii_lowercase().as_str() {
        "t" | "true" | "1" | "y" | "yes" | "on" => Ok(true),
        "f" | "false" | "0" | "n" | "no" | "off" => Ok(false),
        _ => Err(conflict("bool")),
    }
}

/// Splits `[+-]digits[.digits]` into (negative, integer digits, fraction
/// digits); at least one digit overall.
fn decimal_parts(text: &[u8]) -> Option<(bool, &[u8], &[u8])> {
    let (neg, rest) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (i, f) = match rest.iter().position(|&b| b == b'.') {
        Some(p) => (&rest[..p], &rest[p + 1..]),
        None => (rest, &rest[rest.len()..]),
    };
    if i.is_empty() && f.is_empty() {
        return None;
    }
    if !i.iter().all(u8::is_ascii_digit) || !f.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some((neg, i, f))
}

/// The unscaled decimal128 value of `text` at scale `s`, checking it has at
/// most `p` digits; never rounds.
pub fn decimal(text: &[u8], p: u8, s: i8, unsigned: bool) -> Result<i128, Reject> {
    let what = format!("decimal({p},{s})");
    if text == b"NaN" || text.ends_with(b"Infinity") {
        return Err(range(&what));
    }
    let (neg, i, f) = decimal_parts(text).ok_or_else(|| conflict(&what))?;
    let s = s as usize;
    let i = match i.iter().position(|&b| b != b'0') {
        Some(k) => &i[k..],
        None => &i[i.len()..],
    };
    let (f_keep, f_rest) = if f.len() > s {
        (&f[..s], &f[s..])
    } else {
        (f, &f[f.len()..])
    };
    if f_rest.iter().any(|&b| b != b'0') {
        return Err(Reject::new(
            Reason::OutOfRange,
            format!("value has more fractional digits than {what} holds"),
        ));
    }
    if i.len() > p as usize - s {
        return Err(range(&what));
    }
    let mut v: i128 = 0;
    for &d in i.iter().chain(f_keep) {
        v = v * 10 + i128::from(d - b'0');
    }
    for _ in f_keep.len()..s {
        v *= 10;
    }
    if neg && v != 0 {
        if unsigned {
            return Err(range(&what));
        }
        v = -v;
    }
    Ok(v)
}

/// Days from 1970-01-01 to the proleptic Gregorian date (year 0 = 1 BC).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn ymd_to_days(y: i64, m: u32, d: u32, bc: bool) -> Result<i64, Reject> {
    // "0001-01-01 BC" is year 0 in proleptic Gregorian numbering.
    let y = if bc { 1 - y } else { y };
    if y == 0 && !bc || m == 0 || d == 0 {
        return Err(range("date (zero date)"));
    }
    if m > 12 || d > days_in_month(y, m) {
        return Err(conflict("date"));
    }
    Ok(days_from_civil(y, m, d))
}

struct Cur<'a> {
    t: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn new(t: &'a [u8]) -> Self {
        Cur { t, i: 0 }
    }
    fn peek(&self) -> Option<u8> {
        self.t.get(self.i).copied()
    }
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn digits(&mut self, min: usize, max: usize) -> Option<(u64, usize)> {
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(b @ b'0'..=b'9') = self.peek() {
            if self.i - start == max {
                break;
            }
            v = v * 10 + u64::from(b - b'0');
            self.i += 1;
        }
        let n = self.i - start;
        (n >= min).then_some((v, n))
    }
    fn end(&self, what: &str) -> Result<(), Reject> {
        if self.i == self.t.len() {
            Ok(())
        } else {
            Err(conflict(what))
        }
    }
    /// YYYY-MM-DD (4 or more year digits).
    fn date_raw(&mut self) -> Result<(i64, u32, u32), Reject> {
        let bad = || conflict("date");
        let (y, _) = self.digits(4, 9).ok_or_else(bad)?;
        if !self.eat(b'-') {
            return Err(bad());
        }
        let (m, _) = self.digits(2, 2).ok_or_else(bad)?;
        if !self.eat(b'-') {
            return Err(bad());
        }
        let (d, _) = self.digits(2, 2).ok_or_else(bad)?;
        Ok((y as i64, m as u32, d as u32))
    }
    fn date(&mut self) -> Result<(i64, u32, u32), Reject> {
        if self.t == b"infinity" || self.t == b"-infinity" {
            return Err(range("date (infinity)"));
        }
        self.date_raw()
    }
    fn bc(&mut self) -> bool {
        if self.t[self.i..] == *b" BC" {
            self.i += 3;
            true
        } else {
            false
        }
    }
    fn bc_suffix_date(&mut self, ymd: (i64, u32, u32)) -> Result<Val, Reject> {
        let bc = self.bc();
        self.end("date")?;
        let days = ymd_to_days(ymd.0, ymd.1, ymd.2, bc)?;
        Ok(Val::I(i64::from(
            i32::try_from(days).map_err(|_| range("date32"))?,
        )))
    }
    /// HH:MM:SS[.ffffff] in microseconds; `span` allows a sign and hours
    /// up to 838 (MySQL time), otherwise hours are 0..=23.
    fn time(&mut self, span: bool) -> Result<i64, Reject> {
        self.time_inner(span, false)
    }
    /// A time of day; with end_of_day, 24:00:00 (which Postgres accepts
    /// for time and timetz) too.
    fn time_of_day(&mut self, end_of_day: bool) -> Result<i64, Reject> {
        self.time_inner(false, end_of_day)
    }
    fn time_inner(&mut self, span: bool, end_of_day: bool) -> Result<i64, Reject> {
        let what = if span { "time span" } else { "time" };
        if self.t.starts_with(b"infinity") || self.t.starts_with(b"-infinity") {
            return Err(range("timestamp (infinity)"));
        }
        let neg = span && self.eat(b'-');
        let (h, _) = self
            .digits(2, if span { 3 } else { 2 })
            .ok_or_else(|| conflict(what))?;
        if !self.eat(b':') {
            return Err(conflict(what));
        }
        let (m, _) = self.digits(2, 2).ok_or_else(|| conflict(what))?;
        let (sec, _) = if self.eat(b':') {
            self.digits(2, 2).ok_or_else(|| conflict(what))?
        } else {
            (0, 0)
        };
        let mut us = 0u64;
        if self.eat(b'.') {
            let (f, n) = self.digits(1, 32).ok_or_else(|| conflict(what))?;
            if n > 6 {
                return Err(Reject::new(
                    Reason::OutOfRange,
                    "value has more than 6 fractional digits of seconds",
                ));
            }
            us = f * 10u64.pow(6 - n as u32);
        }
        if m > 59 || sec > 60 {
            return Err(conflict(what));
        }
        let midnight_end = end_of_day && h == 24 && m == 0 && sec == 0 && us == 0;
        if (!span && h > 23 && !midnight_end) || (span && h > 838) || sec == 60 {
            return Err(range(what));
        }
        let v = ((h * 60 + m) * 60 + sec) * 1_000_000 + us;
        Ok(if neg { -(v as i64) } else { v as i64 })
    }
    /// An offset: Z, ±HH, ±HHMM, ±HH:MM or ±HH:MM:SS, in seconds east.
    fn offset(&mut self) -> Result<Option<i64>, Reject> {
        let sign = match self.peek() {
            Some(b'Z') => {
                self.i += 1;
                return Ok(Some(0));
            }
            Some(b'+') => 1,
            Some(b'-') => -1,
            _ => return Ok(None),
        };
        self.i += 1;
        let bad = || conflict("time zone offset");
        let (h, _) = self.digits(2, 2).ok_or_else(bad)?;
        let mut secs = h * 3600;
        let colon = self.eat(b':');
        if colon || matches!(self.peek(), Some(b'0'..=b'9')) {
            let (m, _) = self.digits(2, 2).ok_or_else(bad)?;
            secs += m * 60;
            if self.eat(b':') {
                let (s, _) = self.digits(2, 2).ok_or_else(bad)?;
                secs += s;
            }
        }
        if secs > 18 * 3600 {
            return Err(bad());
        }
        Ok(Some(sign * secs as i64))
    }
}

/// Microseconds since the epoch (UTC) of an RFC 3339 timestamp
/// (`2024-01-02T03:04:05.123Z`, `...+02:00`; `t`, `z` or a space as
/// separators allowed), or `None` for any other text, including more than 6
/// fractional digits or a leap second: such strings stay text.
pub fn rfc3339_micros(text: &[u8]) -> Option<i64> {
    if text.len() < 20 || text.len() > 40 {
        return None;
    }
    let mut c = Cur::new(text);
    let (y, m, d) = c.date_raw().ok()?;
    if !(c.eat(b'T') || c.eat(b't') || c.eat(b' ')) {
        return None;
    }
    if c.t.len() - c.i < 8 || c.t[c.i + 5] != b':' {
        return None; // RFC 3339 requires seconds
    }
    let us = c.time(false).ok()?;
    let off = if c.eat(b'z') {
        Some(0)
    } else {
        c.offset().ok()?
    };
    let off = off?;
    c.end("timestamp").ok()?;
    let days = ymd_to_days(y, m, d, false).ok()?;
    i64::try_from(i128::from(days) * 86_400_000_000 + i128::from(us) - i128::from(off) * 1_000_000)
        .ok()
}

/// A Postgres interval in its default output style ("postgres"):
/// `1 year 2 mons -3 days +04:05:06.789`.
fn interval(text: &[u8]) -> Result<Val, Reject> {
    let s = ascii(text, "interval")?;
    let (mut months, mut days, mut nanos) = (0i64, 0i64, 0i128);
    let mut toks = s.split_ascii_whitespace().peekable();
    let mut any = false;
    while let Some(tok) = toks.next() {
        any = true;
        if tok.contains(':') {
            let (neg, t) = match tok.as_bytes()[0] {
                b'-' => (true, &tok[1..]),
                b'+' => (false, &tok[1..]),
                _ => (false, tok),
            };
            let mut parts = t.splitn(3, ':');
            let h: i64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| conflict("interval"))?;
            let m: i64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| conflict("interval"))?;
            let sec = parts.next().unwrap_or("0");
            let (si, sf) = sec.split_once('.').unwrap_or((sec, ""));
            let si: i64 = si.parse().map_err(|_| conflict("interval"))?;
            if sf.len() > 9 || !sf.bytes().all(|b| b.is_ascii_digit()) {
                return Err(conflict("interval"));
            }
            let frac: i128 = if sf.is_empty() {
                0
            } else {
                sf.parse::<i128>().map_err(|_| conflict("interval"))?
                    * 10i128.pow(9 - sf.len() as u32)
            };
            let v =
                (i128::from(h) * 3600 + i128::from(m) * 60 + i128::from(si)) * 1_000_000_000 + frac;
            nanos += if neg { -v } else { v };
            continue;
        }
        let n: i64 = tok.parse().map_err(|_| conflict("interval"))?;
        let unit = toks.next().ok_or_else(|| conflict("interval"))?;
        match unit.trim_end_matches('s') {
            "year" => months += n.checked_mul(12).ok_or_else(|| range("interval"))?,
            "mon" | "month" => months += n,
            "day" => days += n,
            "hour" => nanos += i128::from(n) * 3_600_000_000_000,
            "min" | "minute" => nanos += i128::from(n) * 60_000_000_000,
            "sec" | "second" => nanos += i128::from(n) * 1_000_000_000,
            _ => return Err(conflict("interval")),
        }
    }
    if !any {
        return Err(conflict("interval"));
    }
    Ok(Val::Iv {
        months: i32::try_from(months).map_err(|_| range("interval"))?,
        days: i32::try_from(days).map_err(|_| range("interval"))?,
        nanos: i64::try_from(nanos).map_err(|_| range("interval"))?,
    })
}

/// A one-dimensional Postgres array in text form: `{1,2,NULL}`,
/// `{"a b","c\"d"}`. Multidimensional arrays and explicit bounds are a
/// type conflict.
fn array(
    elem: &Decl,
    text: &[u8],
    src: Src,
    arena: &mut Vec<u8>,
    elems: &mut Vec<Val>,
    scratch: &mut Vec<u8>,
) -> Result<Val, Reject> {
    let bad = || conflict("array (one-dimensional, {a,b,...})");
    if text.len() < 2 || text[0] != b'{' || text[text.len() - 1] != b'}' {
        return Err(bad());
    }
    let base = match src {
        Src::Payload(abs) => Some(abs),
        Src::Scratch => None,
    };
    let start = elems.len();
    let inner = &text[1..text.len() - 1];
    let mut i = 0;
    if !inner.is_empty() {
        loop {
            while i < inner.len() && inner[i].is_ascii_whitespace() {
                i += 1;
            }
            let v = if inner.get(i) == Some(&b'"') {
                i += 1;
                scratch.clear();
                loop {
                    match inner.get(i) {
                        None => return Err(bad()),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => {
                            let c = *inner.get(i + 1).ok_or_else(bad)?;
                            scratch.push(c);
                            i += 2;
                        }
                        Some(&c) => {
                            scratch.push(c);
                            i += 1;
                        }
                    }
                }
                let t = std::mem::take(scratch);
                let r = coerce(elem, &t, Src::Scratch, arena, elems, &mut Vec::new());
                *scratch = t;
                r?
            } else {
                let s = i;
                let mut esc = false;
                while i < inner.len() && inner[i] != b',' {
                    match inner[i] {
                        b'{' | b'}' | b'"' => return Err(bad()),
                        b'\\' => {
                            esc = true;
                            i += 1;
                        }
                        _ => {}
                    }
                    i += 1;
                }
                let mut t = &inner[s..i.min(inner.len())];
                while let Some((last, rest)) = t.split_last() {
                    if last.is_ascii_whitespace() {
                        t = rest;
                    } else {
                        break;
                    }
                }
                if t.is_empty() {
                    return Err(bad());
                }
                if !esc && t.eq_ignore_ascii_case(b"null") {
                    Val::Null
                } else if esc || base.is_none() {
                    scratch.clear();
                    let mut k = 0;
                    while k < t.len() {
                        if t[k] == b'\\' && k + 1 < t.len() {
                            k += 1;
                        }
                        scratch.push(t[k]);
                        k += 1;
                    }
                    let tt = std::mem::take(scratch);
                    let r = coerce(elem, &tt, Src::Scratch, arena, elems, &mut Vec::new());
                    *scratch = tt;
                    r?
                } else {
                    // base is Some: 1 for the '{'.
                    let abs = base.unwrap_or(0) + 1 + s;
                    coerce(elem, t, Src::Payload(abs), arena, elems, &mut Vec::new())?
                }
            };
            elems.push(v);
            while i < inner.len() && inner[i].is_ascii_whitespace() {
                i += 1;
            }
            if i >= inner.len() {
                break;
            }
            if inner[i] != b',' {
                return Err(bad());
            }
            i += 1;
        }
    }
    Ok(Val::List {
        start: start as u32,
        end: elems.len() as u32,
    })
}

#[cfg(test)]
#[path = "coerce_tests.rs"]
mod tests;
