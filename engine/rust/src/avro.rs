//! Registry-framed Avro decoded straight into a declared stream's values:
//! the fast path of the Kafka source's `DecodeRegistry`.
//!
//! The source compiles a plan per writer schema and the stream's declared
//! columns (Go's `avrorow.Decoder.FastPlan`) and registers it once
//! ([`register`], process-wide, content-addressed, bounded). A row whose
//! payload starts with [`MARKER`] is then not a list of text entries but
//!
//! ```text
//! MARKER(10 × 0xff) ‖ u32le plan ‖ u32le Go converter ‖
//! uvarint(raw key tag) [raw key] ‖ uvarint(len) ‖ Avro body ‖
//! entries of the remaining declared columns
//! ```
//!
//! (ten 0xff bytes are an entry header no row payload can start with: it
//! overflows). The plan's fields are decoded into the first `ncols`
//! columns' values as the Go decoder's text would coerce to, exactly; the
//! remaining entries (the Kafka metadata columns) are read as usual.
//!
//! The fast path only takes what it can give exactly as the Go path
//! would. Anything else in a batch — a payload that does not decode, a
//! value the Go text form would make the engine quarantine or hold (invalid
//! UTF-8, a date past year 9999, a NaN), a held column, a plan the stream's
//! declared types don't match — makes the whole push answer
//! [`Status::Fallback`] before any state changed; the Go side then turns
//! the batch's marked rows into the Go decoder's rows and pushes again.

use std::sync::{Arc, RwLock};

use arrow_array::builder::BooleanBufferBuilder;
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int32Array, Int64Array, StringArray, Time64MicrosecondArray,
    TimestampMicrosecondArray, new_null_array,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer};

use crate::coerce::{self, Src, Val};
use crate::decl::Decl;
use crate::error::{Error, Status};
use crate::input::RawRows;
use crate::rows::DeclColumn;

/// The first bytes of a row payload that holds an Avro body.
pub const MARKER: [u8; 10] = [0xff; 10];

/// The most plans a process registers; past it [`register`] refuses new
/// ones (their messages take the Go path).
pub const MAX_PLANS: usize = 4096;

const PLAN_MAGIC: &[u8; 4] = b"AVP1";

/// What a field's value is read as and coerced to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Op {
    Null = 1,
    Bool,
    IntToInt32,
    IntToInt64,
    LongToInt64,
    FloatToF32,
    FloatToF64,
    DoubleToF64,
    String,
    Bytes,
    Fixed,
    Enum,
    Date,
    TimeMillis,
    TimeMicros,
    TsMillis,
    TsMicros,
    LocalMillis,
    LocalMicros,
    UuidString,
    UuidFixed,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        use Op::*;
        const ALL: [Op; 21] = [
            Null,
            Bool,
            IntToInt32,
            IntToInt64,
            LongToInt64,
            FloatToF32,
            FloatToF64,
            DoubleToF64,
            String,
            Bytes,
            Fixed,
            Enum,
            Date,
            TimeMillis,
            TimeMicros,
            TsMillis,
            TsMicros,
            LocalMillis,
            LocalMicros,
            UuidString,
            UuidFixed,
        ];
        ALL.get(usize::from(b).checked_sub(1)?).copied()
    }

    /// Whether a column of `d` takes this op's values.
    fn fits(self, d: &Decl) -> bool {
        use Op::*;
        match self {
            Null => true,
            Bool => *d == Decl::Bool,
            IntToInt32 => *d == Decl::Int32,
            IntToInt64 | LongToInt64 => *d == Decl::Int64,
            FloatToF32 => *d == Decl::Float32,
            FloatToF64 | DoubleToF64 => *d == Decl::Float64,
            String => *d == Decl::Utf8,
            Bytes | Fixed => *d == Decl::Binary { hex: true },
            Enum => *d == Decl::Enum,
            Date => *d == Decl::Date,
            TimeMillis | TimeMicros => *d == Decl::Time,
            TsMillis | TsMicros => *d == Decl::TimestampTz,
            LocalMillis | LocalMicros => *d == Decl::Timestamp,
            UuidString | UuidFixed => *d == Decl::Uuid,
        }
    }
}

#[derive(Debug)]
struct FieldPlan {
    op: Op,
    /// 0: not a union; 1: a union whose branch 0 is null; 2: branch 1.
    null_at: u8,
    /// The column the value goes to; `None`: skipped.
    slot: Option<usize>,
    /// Fixed: the size.
    size: usize,
    /// Enum: the symbols.
    symbols: Vec<Box<[u8]>>,
}

/// A compiled plan: one writer schema's fields into a column list.
#[derive(Debug)]
pub struct Plan {
    /// The root is a union of null and the record.
    nullable: bool,
    /// The branch of the root's null.
    null_branch: i64,
    /// How many columns the Avro value fills (the first ones).
    ncols: usize,
    fields: Vec<FieldPlan>,
    /// An upper bound of the Go row's bytes per Avro body byte, for the
    /// document size limit.
    expansion: usize,
}

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn u8(&mut self) -> Option<u8> {
        let v = *self.b.get(self.i)?;
        self.i += 1;
        Some(v)
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.i.checked_add(n)?;
        let s = self.b.get(self.i..end)?;
        self.i = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn uvarint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let c = self.u8()?;
            v |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Some(v);
            }
        }
        None
    }
    /// An Avro long (zigzag varint of at most 10 bytes).
    #[inline]
    fn long(&mut self) -> Option<i64> {
        let mut u: u64 = 0;
        let mut shift = 0;
        for _ in 0..10 {
            let c = *self.b.get(self.i)?;
            self.i += 1;
            u |= u64::from(c & 0x7f) << shift;
            if c < 0x80 {
                return Some((u >> 1) as i64 ^ -((u & 1) as i64));
            }
            shift += 7;
        }
        None
    }
    #[inline]
    fn int(&mut self) -> Option<i64> {
        let v = self.long()?;
        (i64::from(i32::MIN)..=i64::from(i32::MAX))
            .contains(&v)
            .then_some(v)
    }
    /// An Avro bytes or string: its range in `b`.
    #[inline]
    fn bytes(&mut self) -> Option<(usize, usize)> {
        let n = self.long()?;
        let n = usize::try_from(n).ok()?;
        if n > self.b.len() - self.i {
            return None;
        }
        let s = self.i;
        self.i += n;
        Some((s, self.i))
    }
}

/// Parses a plan's bytes.
pub fn parse(b: &[u8]) -> Result<Plan, Error> {
    let bad = || Error::invalid_input("avro plan: malformed");
    let mut c = Cur { b, i: 0 };
    if c.take(4) != Some(&PLAN_MAGIC[..]) {
        return Err(bad());
    }
    let flags = c.u8().ok_or_else(bad)?;
    let ncols = c.u32().ok_or_else(bad)? as usize;
    let nfields = c.u32().ok_or_else(bad)? as usize;
    if nfields > b.len() {
        return Err(bad());
    }
    let mut fields = Vec::with_capacity(nfields);
    let mut expansion = 32;
    for _ in 0..nfields {
        let op = Op::from_u8(c.u8().ok_or_else(bad)?).ok_or_else(bad)?;
        let null_at = c.u8().ok_or_else(bad)?;
        if null_at > 2 {
            return Err(bad());
        }
        let slot = c.u32().ok_or_else(bad)?;
        let slot = if slot == u32::MAX {
            None
        } else if (slot as usize) < ncols {
            Some(slot as usize)
        } else {
            return Err(bad());
        };
        let size = c.u32().ok_or_else(bad)? as usize;
        let mut symbols = Vec::new();
        match op {
            Op::Enum => {
                if size == 0 || size > b.len() {
                    return Err(bad());
                }
                for _ in 0..size {
                    let n = c.u32().ok_or_else(bad)? as usize;
                    let s = c.take(n).ok_or_else(bad)?;
                    std::str::from_utf8(s).map_err(|_| bad())?;
                    expansion = expansion.max(n + 16);
                    symbols.push(s.into());
                }
            }
            Op::UuidFixed if size != 16 => return Err(bad()),
            _ => {}
        }
        fields.push(FieldPlan {
            op,
            null_at,
            slot,
            size,
            symbols,
        });
    }
    if c.i != b.len() {
        return Err(bad());
    }
    Ok(Plan {
        nullable: flags & 1 != 0,
        null_branch: i64::from(flags >> 1 & 1),
        ncols,
        fields,
        expansion,
    })
}

type Registry = Vec<(Box<[u8]>, Arc<Plan>)>;

static PLANS: RwLock<Registry> = RwLock::new(Vec::new());

/// Registers a plan and returns its ID; the same bytes get the same ID.
/// Plans live as long as the process.
pub fn register(b: &[u8]) -> Result<u32, Error> {
    let mut reg = PLANS
        .write()
        .map_err(|_| Error::internal("avro plans: lock poisoned"))?;
    if let Some(i) = reg.iter().position(|(k, _)| &k[..] == b) {
        return Ok(i as u32);
    }
    if reg.len() >= MAX_PLANS {
        return Err(Error::invalid_input(format!(
            "avro plans: the process has {MAX_PLANS} already"
        )));
    }
    let p = parse(b)?;
    reg.push((b.into(), Arc::new(p)));
    Ok((reg.len() - 1) as u32)
}

/// The plan registered as `id`.
pub fn plan(id: u32) -> Option<Arc<Plan>> {
    PLANS.read().ok()?.get(id as usize).map(|(_, p)| p.clone())
}

/// Whether a row payload holds an Avro body.
#[inline]
pub fn is_marked(payload: &[u8]) -> bool {
    payload.len() >= MARKER.len() && payload[..MARKER.len()] == MARKER
}

fn fallback(why: &str) -> Error {
    Error::new(Status::Fallback, format!("avro fast path: {why}"))
}

/// Per push: the last plan used, and whether it matched the stream's
/// columns.
#[derive(Default)]
pub struct Cache {
    last: Option<(u32, Arc<Plan>)>,
}

impl Cache {
    fn get(&mut self, id: u32, cols: &[DeclColumn]) -> Result<Arc<Plan>, Error> {
        if let Some((i, p)) = &self.last
            && *i == id
        {
            return Ok(p.clone());
        }
        let p = plan(id).ok_or_else(|| fallback("unknown plan"))?;
        if p.ncols > cols.len() {
            return Err(fallback("plan has more columns than the stream"));
        }
        for f in &p.fields {
            if let Some(s) = f.slot
                && !f.op.fits(&cols[s].decl)
            {
                return Err(fallback("plan does not match the declared types"));
            }
        }
        self.last = Some((id, p.clone()));
        Ok(p)
    }
}

// Exact-range bounds: years 1 to 9999, as the Go path's text forms are
// read back without question.
const MIN_DAYS: i64 = -719_162;
const MAX_DAYS: i64 = 2_932_896;
const MIN_US: i64 = MIN_DAYS * 86_400_000_000;
const MAX_US: i64 = (MAX_DAYS + 1) * 86_400_000_000 - 1;
const DAY_US: i64 = 86_400_000_000;

/// Decodes a marked row payload (at absolute offset `base` of the payload
/// buffer) into the values of the plan's columns, appended to `vals`
/// (`plan.ncols` of them). Returns the offset in `payload` of the entries
/// that follow the body. Any error is a [`Status::Fallback`].
pub fn decode(
    cache: &mut Cache,
    cols: &[DeclColumn],
    payload: &[u8],
    base: usize,
    max_document_bytes: usize,
    vals: &mut Vec<Val>,
    arena: &mut Vec<u8>,
) -> Result<(usize, usize), Error> {
    let bad = || fallback("payload");
    let mut c = Cur {
        b: payload,
        i: MARKER.len(),
    };
    let id = c.u32().ok_or_else(bad)?;
    c.u32().ok_or_else(bad)?; // the Go side's converter
    let plan = cache.get(id, cols)?;
    let tag = c.uvarint().ok_or_else(bad)?;
    if tag > 0 {
        c.take(usize::try_from(tag - 1).map_err(|_| bad())?)
            .ok_or_else(bad)?;
    }
    let n = usize::try_from(c.uvarint().ok_or_else(bad)?).map_err(|_| bad())?;
    let start = c.i;
    let end = start
        .checked_add(n)
        .filter(|&e| e <= payload.len())
        .ok_or_else(bad)?;
    if n.saturating_mul(plan.expansion) > max_document_bytes
        || payload.len() > max_document_bytes / 2
    {
        return Err(fallback("a message near the document size limit"));
    }
    let v0 = vals.len();
    vals.resize(v0 + plan.ncols, Val::Null);
    let mut r = Cur {
        b: &payload[..end],
        i: start,
    };
    let out = &mut vals[v0..];
    let ok = body(&plan, &mut r, base, out, arena);
    if ok.is_none() || r.i != end {
        return Err(fallback("a message the Go path decides"));
    }
    Ok((plan.ncols, end))
}

#[inline]
fn body(
    plan: &Plan,
    r: &mut Cur<'_>,
    base: usize,
    out: &mut [Val],
    arena: &mut Vec<u8>,
) -> Option<()> {
    if plan.nullable {
        let b = r.long()?;
        if b == plan.null_branch {
            return Some(()); // null: every column null
        }
        if b != 1 - plan.null_branch {
            return None;
        }
    }
    for f in &plan.fields {
        if f.null_at != 0 {
            let b = r.long()?;
            let null_branch = i64::from(f.null_at - 1);
            if b == null_branch {
                continue; // null
            }
            if b != 1 - null_branch {
                return None;
            }
        }
        let v = value(f, r, base, arena, true)?;
        if let Some(s) = f.slot {
            out[s] = v;
        }
    }
    Some(())
}

#[inline]
fn value(
    f: &FieldPlan,
    r: &mut Cur<'_>,
    base: usize,
    arena: &mut Vec<u8>,
    check_utf8: bool,
) -> Option<Val> {
    Some(match f.op {
        Op::Null => Val::Null,
        Op::Bool => match r.u8()? {
            0 => Val::B(false),
            1 => Val::B(true),
            _ => return None,
        },
        Op::IntToInt32 | Op::IntToInt64 => Val::I(r.int()?),
        Op::LongToInt64 => Val::I(r.long()?),
        Op::FloatToF32 | Op::FloatToF64 => {
            let x = f32::from_le_bytes(r.take(4)?.try_into().ok()?);
            if !x.is_finite() {
                return None;
            }
            Val::F(f64::from(x))
        }
        Op::DoubleToF64 => {
            let x = f64::from_le_bytes(r.take(8)?.try_into().ok()?);
            if !x.is_finite() {
                return None;
            }
            Val::F(x)
        }
        Op::String => {
            let (s, e) = r.bytes()?;
            if check_utf8 {
                std::str::from_utf8(&r.b[s..e]).ok()?;
            }
            text(base + s, base + e)?
        }
        Op::Bytes => {
            let (s, e) = r.bytes()?;
            text(base + s, base + e)?
        }
        Op::Fixed => {
            let s = r.i;
            r.take(f.size)?;
            text(base + s, base + r.i)?
        }
        Op::Enum => {
            let i = r.int()?;
            let sym = f.symbols.get(usize::try_from(i).ok()?)?;
            let s = arena.len();
            arena.extend_from_slice(sym);
            Val::Text {
                arena: true,
                start: u32::try_from(s).ok()?,
                end: u32::try_from(arena.len()).ok()?,
            }
        }
        Op::Date => {
            let d = r.int()?;
            if !(MIN_DAYS..=MAX_DAYS).contains(&d) {
                return None;
            }
            Val::I(d)
        }
        Op::TimeMillis => {
            let v = r.int()?.checked_mul(1000)?;
            if !(0..DAY_US).contains(&v) {
                return None;
            }
            Val::I(v)
        }
        Op::TimeMicros => {
            let v = r.long()?;
            if !(0..DAY_US).contains(&v) {
                return None;
            }
            Val::I(v)
        }
        Op::TsMillis | Op::LocalMillis => ts(r.long()?.checked_mul(1000)?)?,
        Op::TsMicros | Op::LocalMicros => ts(r.long()?)?,
        Op::UuidString => {
            let (s, e) = r.bytes()?;
            coerce::coerce(
                &Decl::Uuid,
                &r.b[s..e],
                Src::Payload(base + s),
                arena,
                &mut Vec::new(),
                &mut Vec::new(),
            )
            .ok()?
        }
        Op::UuidFixed => Val::Uuid(u128::from_be_bytes(r.take(16)?.try_into().ok()?)),
    })
}

#[inline]
fn ts(us: i64) -> Option<Val> {
    (MIN_US..=MAX_US).contains(&us).then_some(Val::I(us))
}

#[inline]
fn text(s: usize, e: usize) -> Option<Val> {
    Some(Val::Text {
        arena: false,
        start: u32::try_from(s).ok()?,
        end: u32::try_from(e).ok()?,
    })
}

/// A column's values being built by [`direct`].
enum Buf {
    Null,
    Bool(BooleanBufferBuilder),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes { offs: Vec<i32>, data: Vec<u8> },
    Uuid(Vec<u8>),
}

impl Buf {
    fn new(d: &Decl, n: usize) -> Buf {
        match d {
            Decl::Bool => Buf::Bool(BooleanBufferBuilder::new(n)),
            Decl::Int32 | Decl::Date => Buf::I32(Vec::with_capacity(n)),
            Decl::Int64 | Decl::Time | Decl::Timestamp | Decl::TimestampTz => {
                Buf::I64(Vec::with_capacity(n))
            }
            Decl::Float32 => Buf::F32(Vec::with_capacity(n)),
            Decl::Float64 => Buf::F64(Vec::with_capacity(n)),
            Decl::Utf8 | Decl::Enum | Decl::Binary { hex: true } => {
                let mut offs = Vec::with_capacity(n + 1);
                offs.push(0);
                Buf::Bytes {
                    offs,
                    data: Vec::with_capacity(16 * n),
                }
            }
            Decl::Uuid => Buf::Uuid(Vec::with_capacity(16 * n)),
            _ => Buf::Null,
        }
    }

    #[inline]
    fn null(&mut self) {
        match self {
            Buf::Null => {}
            Buf::Bool(b) => b.append(false),
            Buf::I32(v) => v.push(0),
            Buf::I64(v) => v.push(0),
            Buf::F32(v) => v.push(0.0),
            Buf::F64(v) => v.push(0.0),
            Buf::Bytes { offs, data } => offs.push(data.len() as i32),
            Buf::Uuid(v) => v.extend_from_slice(&[0; 16]),
        }
    }

    fn finish(self, d: &Decl, n: usize, nulls: Option<NullBuffer>) -> Result<ArrayRef, Error> {
        Ok(match (self, d) {
            (Buf::Null, d) => new_null_array(&d.data_type(), n),
            (Buf::Bool(mut b), _) => Arc::new(BooleanArray::new(b.finish(), nulls)),
            (Buf::I32(v), Decl::Date) => Arc::new(Date32Array::new(v.into(), nulls)),
            (Buf::I32(v), _) => Arc::new(Int32Array::new(v.into(), nulls)),
            (Buf::I64(v), Decl::Time) => Arc::new(Time64MicrosecondArray::new(v.into(), nulls)),
            (Buf::I64(v), Decl::Timestamp) => {
                Arc::new(TimestampMicrosecondArray::new(v.into(), nulls))
            }
            (Buf::I64(v), Decl::TimestampTz) => {
                Arc::new(TimestampMicrosecondArray::new(v.into(), nulls).with_timezone("UTC"))
            }
            (Buf::I64(v), _) => Arc::new(Int64Array::new(v.into(), nulls)),
            (Buf::F32(v), _) => Arc::new(Float32Array::new(v.into(), nulls)),
            (Buf::F64(v), _) => Arc::new(Float64Array::new(v.into(), nulls)),
            (Buf::Bytes { offs, data }, Decl::Binary { .. }) => Arc::new(BinaryArray::new(
                OffsetBuffer::new(offs.into()),
                Buffer::from_vec(data),
                nulls,
            )),
            (Buf::Bytes { offs, data }, _) => Arc::new(
                // Checks the values are UTF-8, all at once (the
                // strings' bounds are char boundaries, checked too).
                StringArray::try_new(
                    OffsetBuffer::new(offs.into()),
                    Buffer::from_vec(data),
                    nulls,
                )
                .map_err(|_| fallback("a string that is not UTF-8"))?,
            ),
            (Buf::Uuid(v), _) => Arc::new(
                FixedSizeBinaryArray::try_new(16, Buffer::from_vec(v), nulls)
                    .map_err(|e| Error::internal(format!("avro uuid column: {e}")))?,
            ),
        })
    }
}

/// A column's validity, materialized at its first null.
#[derive(Default)]
struct Nulls {
    len: usize,
    bits: Option<BooleanBufferBuilder>,
}

impl Nulls {
    #[inline]
    fn push(&mut self, valid: bool) {
        match &mut self.bits {
            Some(b) => b.append(valid),
            None if valid => {}
            None => {
                let mut b = BooleanBufferBuilder::new(self.len.max(64) * 2);
                b.append_n(self.len, true);
                b.append(false);
                self.bits = Some(b);
            }
        }
        self.len += 1;
    }

    fn finish(self) -> Option<NullBuffer> {
        self.bits.map(|mut b| NullBuffer::new(b.finish()))
    }
}

/// Reads a non-null value of `f` into its column's buffer: [`value`]
/// without the value in between.
#[inline]
fn put(f: &FieldPlan, r: &mut Cur<'_>, buf: &mut Buf) -> Option<()> {
    macro_rules! into {
        ($v:ident, $e:expr) => {{
            let Buf::$v(b) = buf else { return None };
            b.push($e)
        }};
    }
    let bytes = |buf: &mut Buf, src: &[u8]| -> Option<()> {
        let Buf::Bytes { offs, data } = buf else {
            return None;
        };
        data.extend_from_slice(src);
        offs.push(i32::try_from(data.len()).ok()?);
        Some(())
    };
    match f.op {
        Op::Null => return None,
        Op::Bool => {
            let v = match r.u8()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            let Buf::Bool(b) = buf else { return None };
            b.append(v);
        }
        Op::IntToInt32 => into!(I32, r.int()? as i32),
        Op::IntToInt64 => into!(I64, r.int()?),
        Op::LongToInt64 => into!(I64, r.long()?),
        Op::FloatToF32 => into!(F32, {
            let x = f32::from_le_bytes(r.take(4)?.try_into().ok()?);
            if !x.is_finite() {
                return None;
            }
            x
        }),
        Op::FloatToF64 => into!(F64, {
            let x = f32::from_le_bytes(r.take(4)?.try_into().ok()?);
            if !x.is_finite() {
                return None;
            }
            f64::from(x)
        }),
        Op::DoubleToF64 => into!(F64, {
            let x = f64::from_le_bytes(r.take(8)?.try_into().ok()?);
            if !x.is_finite() {
                return None;
            }
            x
        }),
        // UTF-8 is checked per column at the end (Buf::finish).
        Op::String | Op::Bytes => {
            let (s, e) = r.bytes()?;
            bytes(buf, &r.b[s..e])?
        }
        Op::Fixed => bytes(buf, r.take(f.size)?)?,
        Op::Enum => {
            let i = r.int()?;
            bytes(buf, f.symbols.get(usize::try_from(i).ok()?)?)?
        }
        Op::Date => into!(I32, {
            let d = r.int()?;
            if !(MIN_DAYS..=MAX_DAYS).contains(&d) {
                return None;
            }
            d as i32
        }),
        Op::TimeMillis => into!(I64, {
            let v = r.int()?.checked_mul(1000)?;
            if !(0..DAY_US).contains(&v) {
                return None;
            }
            v
        }),
        Op::TimeMicros => into!(I64, {
            let v = r.long()?;
            if !(0..DAY_US).contains(&v) {
                return None;
            }
            v
        }),
        Op::TsMillis | Op::LocalMillis => into!(I64, {
            let v = r.long()?.checked_mul(1000)?;
            if !(MIN_US..=MAX_US).contains(&v) {
                return None;
            }
            v
        }),
        Op::TsMicros | Op::LocalMicros => into!(I64, {
            let v = r.long()?;
            if !(MIN_US..=MAX_US).contains(&v) {
                return None;
            }
            v
        }),
        Op::UuidString => {
            let (s, e) = r.bytes()?;
            let Val::Uuid(u) = coerce::coerce(
                &Decl::Uuid,
                &r.b[s..e],
                Src::Scratch,
                &mut Vec::new(),
                &mut Vec::new(),
                &mut Vec::new(),
            )
            .ok()?
            else {
                return None;
            };
            let Buf::Uuid(b) = buf else { return None };
            b.extend_from_slice(&u.to_be_bytes());
        }
        Op::UuidFixed => {
            let u = r.take(16)?;
            let Buf::Uuid(b) = buf else { return None };
            b.extend_from_slice(u);
        }
    }
    Some(())
}

/// The direct path of a push whose rows are all Avro-marked with one
/// plan that fills every declared column: each value goes straight into
/// its column's buffer, no per-row values in between. `Ok(None)` when the
/// batch is not such a push (or has a row the engine would quarantine
/// before decoding: an unknown op, a missing key, or a null key column):
/// the caller takes the row-by-row path. Any message the fast path can't give exactly is a
/// [`Status::Fallback`], as for [`decode`].
pub fn direct(
    rows: &RawRows<'_>,
    cols: &[DeclColumn],
    keyed: bool,
    max_document_bytes: usize,
    arena: &mut Vec<u8>,
) -> Result<Option<Vec<ArrayRef>>, Error> {
    let n = rows.len();
    if n == 0 {
        return Ok(None);
    }
    let id_of = |p: &[u8]| -> Option<[u8; 4]> {
        if !is_marked(p) {
            return None;
        }
        p.get(MARKER.len()..MARKER.len() + 4)?.try_into().ok()
    };
    let Some(id) = id_of(rows.payload(0)) else {
        return Ok(None);
    };
    for i in 0..n {
        if crate::meta::op_name(rows.op(i)).is_none()
            || (keyed && rows.key(i).is_empty())
            || id_of(rows.payload(i)) != Some(id)
        {
            return Ok(None);
        }
    }
    let mut cache = Cache::default();
    let plan = cache.get(u32::from_le_bytes(id), cols)?;
    if plan.ncols != cols.len() {
        return Ok(None);
    }
    let mut bufs: Vec<Buf> = cols.iter().map(|c| Buf::new(&c.decl, n)).collect();
    let mut valid: Vec<Nulls> = cols.iter().map(|_| Nulls::default()).collect();
    let mut filled = vec![false; cols.len()];
    for f in &plan.fields {
        if let Some(s) = f.slot {
            filled[s] = true;
        }
    }
    let unfilled: Vec<usize> = (0..cols.len()).filter(|&c| !filled[c]).collect();
    let bad = || fallback("payload");
    for i in 0..n {
        let payload = rows.payload(i);
        if payload.len() > max_document_bytes / 2 {
            return Err(fallback("a message near the document size limit"));
        }
        let base = rows.payload_start(i);
        let mut c = Cur {
            b: payload,
            i: MARKER.len() + 8,
        };
        let tag = c.uvarint().ok_or_else(bad)?;
        if tag > 0 {
            c.take(usize::try_from(tag - 1).map_err(|_| bad())?)
                .ok_or_else(bad)?;
        }
        let len = usize::try_from(c.uvarint().ok_or_else(bad)?).map_err(|_| bad())?;
        let start = c.i;
        let end = start
            .checked_add(len)
            .filter(|&e| e == payload.len())
            .ok_or_else(bad)?;
        if len.saturating_mul(plan.expansion) > max_document_bytes {
            return Err(fallback("a message near the document size limit"));
        }
        let mut r = Cur {
            b: payload,
            i: start,
        };
        arena.clear();
        let ok = (|| -> Option<()> {
            if plan.nullable {
                let b = r.long()?;
                if b == plan.null_branch {
                    for (buf, v) in bufs.iter_mut().zip(valid.iter_mut()) {
                        buf.null();
                        v.push(false);
                    }
                    return Some(());
                }
                if b != 1 - plan.null_branch {
                    return None;
                }
            }
            for f in &plan.fields {
                let mut null = false;
                if f.null_at != 0 {
                    let b = r.long()?;
                    let nb = i64::from(f.null_at - 1);
                    if b == nb {
                        null = true;
                    } else if b != 1 - nb {
                        return None;
                    }
                }
                match f.slot {
                    None if !null => {
                        value(f, &mut r, base, arena, false)?;
                    }
                    None => {}
                    Some(s) if null || f.op == Op::Null => {
                        bufs[s].null();
                        valid[s].push(false);
                    }
                    Some(s) => {
                        put(f, &mut r, &mut bufs[s])?;
                        valid[s].push(true);
                    }
                }
            }
            for &c in &unfilled {
                bufs[c].null();
                valid[c].push(false);
            }
            Some(())
        })();
        if ok.is_none() || r.i != end {
            return Err(fallback("a message the Go path decides"));
        }
    }
    // A null key column: the row-by-row path quarantines the row.
    if cols
        .iter()
        .zip(&valid)
        .any(|(c, v)| c.key && v.bits.is_some())
    {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(cols.len());
    for ((b, v), c) in bufs.into_iter().zip(valid).zip(cols) {
        out.push(b.finish(&c.decl, n, v.finish())?);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_bytes(nullable: bool, ncols: u32, fields: &[(u8, u8, u32, u32, &[&str])]) -> Vec<u8> {
        let mut b = PLAN_MAGIC.to_vec();
        b.push(u8::from(nullable));
        b.extend(ncols.to_le_bytes());
        b.extend((fields.len() as u32).to_le_bytes());
        for &(op, null_at, slot, size, syms) in fields {
            b.push(op);
            b.push(null_at);
            b.extend(slot.to_le_bytes());
            b.extend(size.to_le_bytes());
            for s in syms {
                b.extend((s.len() as u32).to_le_bytes());
                b.extend(s.as_bytes());
            }
        }
        b
    }

    #[test]
    fn plans_parse_and_register_once() {
        let b = plan_bytes(
            false,
            2,
            &[
                (5, 0, 0, 0, &[]),
                (9, 2, 1, 0, &[]),
                (12, 0, u32::MAX, 2, &["A", "B"]),
            ],
        );
        let p = parse(&b).unwrap();
        assert_eq!(p.fields.len(), 3);
        assert_eq!(p.fields[2].slot, None);
        let a = register(&b).unwrap();
        assert_eq!(register(&b).unwrap(), a);
        assert!(parse(&b[..b.len() - 1]).is_err());
        assert!(parse(&plan_bytes(false, 1, &[(5, 0, 1, 0, &[])])).is_err()); // slot past ncols
        assert!(parse(&plan_bytes(false, 1, &[(99, 0, 0, 0, &[])])).is_err());
    }

    fn zz(v: i64, out: &mut Vec<u8>) {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        while u >= 0x80 {
            out.push(u as u8 | 0x80);
            u >>= 7;
        }
        out.push(u as u8);
    }

    #[test]
    fn decodes_and_declines() {
        let p = Arc::new(
            parse(&plan_bytes(
                false,
                3,
                &[
                    (5, 0, 0, 0, &[]),
                    (9, 1, 1, 0, &[]),
                    (12, 0, 2, 2, &["A", "B"]),
                ],
            ))
            .unwrap(),
        );
        let mut msg = Vec::new();
        zz(-5, &mut msg);
        zz(1, &mut msg); // string branch
        zz(2, &mut msg);
        msg.extend(b"hi");
        zz(1, &mut msg);
        let mut out = vec![Val::Null; 3];
        let mut arena = Vec::new();
        let mut r = Cur { b: &msg, i: 0 };
        body_ok(&p, &mut r, &mut out, &mut arena);
        assert_eq!(out[0], Val::I(-5));
        assert!(matches!(
            out[1],
            Val::Text {
                arena: false,
                start: 3,
                end: 5
            }
        ));
        assert_eq!(&arena[..], b"B");
        // Enum index out of range, bad union branch, truncation: declined.
        for bad in [&msg[..msg.len() - 1], &[10, 4][..], &[10, 0, 3][..]] {
            let mut r = Cur { b: bad, i: 0 };
            assert!(body(&p, &mut r, 0, &mut out, &mut arena).is_none() || r.i != bad.len());
        }
    }

    fn body_ok(p: &Plan, r: &mut Cur<'_>, out: &mut [Val], arena: &mut Vec<u8>) {
        body(p, r, 0, out, arena).unwrap();
        assert_eq!(r.i, r.b.len());
    }
}
