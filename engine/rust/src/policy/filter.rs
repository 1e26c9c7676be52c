//! Row filters: a condition evaluated node by node over whole columns,
//! with SQL's three-valued logic, into a per-row decision.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

use super::{CmpOp, Cond, Lit, Policies};
use crate::meta;

// Truth values of a row's condition.
const F: u8 = 0;
const T: u8 = 1;
const U: u8 = 2;

/// Evaluates `c` over `n` rows into `out` (F, T or U per row). `col`
/// finds a column by source name.
fn eval<'a>(c: &Cond, n: usize, col: &impl Fn(&str) -> Option<&'a ArrayRef>, out: &mut Vec<u8>) {
    out.clear();
    match c {
        Cond::IsNull(name) | Cond::NotNull(name) => {
            let want_null = matches!(c, Cond::IsNull(_));
            match col(name) {
                None => out.resize(n, if want_null { T } else { F }),
                Some(a) => out.extend((0..n).map(|i| (a.is_null(i) == want_null) as u8)),
            }
        }
        Cond::Cmp(name, op, l) => match col(name) {
            None => out.resize(n, U),
            Some(a) => cmp_col(
                a,
                n,
                out,
                |o| match o {
                    None => U,
                    Some(o) => op_holds(*op, o) as u8,
                },
                l,
            ),
        },
        Cond::In(name, ls) => match col(name) {
            None => out.resize(n, U),
            Some(a) if in_set(a, n, ls, out) => {}
            Some(a) => {
                out.resize(n, F);
                let mut tmp = Vec::with_capacity(n);
                for l in ls {
                    tmp.clear();
                    cmp_col(
                        a,
                        n,
                        &mut tmp,
                        |o| match o {
                            None => U,
                            Some(o) => (o == std::cmp::Ordering::Equal) as u8,
                        },
                        l,
                    );
                    for (r, t) in out.iter_mut().zip(&tmp) {
                        *r = or3(*r, *t);
                    }
                }
                if ls.is_empty() {
                    for (i, r) in out.iter_mut().enumerate() {
                        if a.is_null(i) {
                            *r = U;
                        }
                    }
                }
            }
        },
        Cond::And(cs) | Cond::Or(cs) => {
            let and = matches!(c, Cond::And(_));
            out.resize(n, if and { T } else { F });
            let mut tmp = Vec::with_capacity(n);
            for c in cs {
                eval(c, n, col, &mut tmp);
                for (r, t) in out.iter_mut().zip(&tmp) {
                    *r = if and { and3(*r, *t) } else { or3(*r, *t) };
                }
            }
        }
        Cond::Not(c) => {
            eval(c, n, col, out);
            for r in out.iter_mut() {
                *r = match *r {
                    T => F,
                    F => T,
                    u => u,
                };
            }
        }
    }
}

/// `In` over an integer, float or utf8 column with its literals in
/// sorted sets, one binary search per row (the general path compares
/// every literal with every row); false, and `out` untouched, for other
/// columns. Same logic as that path: a null, a NaN or no match where
/// some literal can't be compared (another type, a NaN) is unknown.
fn in_set(a: &ArrayRef, n: usize, ls: &[Lit], out: &mut Vec<u8>) -> bool {
    fn sorted<T: PartialOrd>(mut v: Vec<T>) -> Vec<T> {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
        v
    }
    fn has<T: PartialOrd>(set: &[T], v: &T) -> bool {
        set.binary_search_by(|x| x.partial_cmp(v).unwrap_or(std::cmp::Ordering::Less))
            .is_ok()
    }
    let dt = a.data_type();
    let miss = |odd: bool| if odd { U } else { F };
    if dt.is_integer() || dt.is_floating() {
        let ints = sorted(
            ls.iter()
                .filter_map(|l| match l {
                    Lit::Int(x) => Some(*x as i128),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        );
        let floats = sorted(
            ls.iter()
                .filter_map(|l| match l {
                    Lit::Float(x) if !x.is_nan() => Some(*x),
                    Lit::Int(x) if dt.is_floating() => Some(*x as f64),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        );
        let odd = ls.iter().any(|l| match l {
            Lit::Float(x) => x.is_nan(),
            Lit::Int(_) => false,
            _ => true,
        });
        macro_rules! ints {
            ($t:ty) => {{
                let p = a.as_primitive::<$t>();
                out.extend((0..n).map(|i| {
                    if p.is_null(i) {
                        return U;
                    }
                    let v = p.value(i) as i128;
                    if has(&ints, &v) || has(&floats, &(v as f64)) {
                        T
                    } else {
                        miss(odd)
                    }
                }));
            }};
        }
        macro_rules! floats {
            ($t:ty) => {{
                let p = a.as_primitive::<$t>();
                out.extend((0..n).map(|i| {
                    if p.is_null(i) {
                        return U;
                    }
                    let v = p.value(i) as f64;
                    if v.is_nan() {
                        miss(!ls.is_empty())
                    } else if has(&floats, &v) {
                        T
                    } else {
                        miss(odd)
                    }
                }));
            }};
        }
        out.clear();
        match dt {
            DataType::Int8 => ints!(Int8Type),
            DataType::Int16 => ints!(Int16Type),
            DataType::Int32 => ints!(Int32Type),
            DataType::Int64 => ints!(Int64Type),
            DataType::UInt8 => ints!(UInt8Type),
            DataType::UInt16 => ints!(UInt16Type),
            DataType::UInt32 => ints!(UInt32Type),
            DataType::UInt64 => ints!(UInt64Type),
            DataType::Float32 => floats!(Float32Type),
            DataType::Float64 => floats!(Float64Type),
            _ => return false,
        }
        return true;
    }
    if *dt == DataType::Utf8 {
        let strs = sorted(
            ls.iter()
                .filter_map(|l| match l {
                    Lit::Str(x) => Some(x.as_bytes()),
                    _ => None,
                })
                .collect::<Vec<_>>(),
        );
        let odd = ls.iter().any(|l| !matches!(l, Lit::Str(_)));
        let s = a.as_string::<i32>();
        out.clear();
        out.extend((0..n).map(|i| {
            if s.is_null(i) {
                U
            } else if strs.binary_search(&s.value(i).as_bytes()).is_ok() {
                T
            } else {
                miss(odd)
            }
        }));
        return true;
    }
    false
}

fn and3(a: u8, b: u8) -> u8 {
    if a == F || b == F {
        F
    } else if a == T && b == T {
        T
    } else {
        U
    }
}

fn or3(a: u8, b: u8) -> u8 {
    if a == T || b == T {
        T
    } else if a == F && b == F {
        F
    } else {
        U
    }
}

fn op_holds(op: CmpOp, o: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        CmpOp::Eq => o == Equal,
        CmpOp::Ne => o != Equal,
        CmpOp::Lt => o == Less,
        CmpOp::Le => o != Greater,
        CmpOp::Gt => o == Greater,
        CmpOp::Ge => o != Less,
    }
}

/// Pushes, per row, `f` of the ordering of the row's value against `l`
/// (None: null, or not comparable).
fn cmp_col(
    a: &ArrayRef,
    n: usize,
    out: &mut Vec<u8>,
    f: impl Fn(Option<std::cmp::Ordering>) -> u8,
    l: &Lit,
) {
    use std::cmp::Ordering;
    macro_rules! ints {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            for i in 0..n {
                let o = if p.is_null(i) {
                    None
                } else {
                    let v = p.value(i) as i128;
                    match l {
                        Lit::Int(x) => Some(v.cmp(&(*x as i128))),
                        Lit::Float(x) => (v as f64).partial_cmp(x),
                        _ => None,
                    }
                };
                out.push(f(o));
            }
        }};
    }
    macro_rules! floats {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            for i in 0..n {
                let o = if p.is_null(i) {
                    None
                } else {
                    let v = p.value(i) as f64;
                    match l {
                        Lit::Int(x) => v.partial_cmp(&(*x as f64)),
                        Lit::Float(x) => v.partial_cmp(x),
                        _ => None,
                    }
                };
                out.push(f(o));
            }
        }};
    }
    match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => ints!(UInt64Type),
        DataType::Float32 => floats!(Float32Type),
        DataType::Float64 => floats!(Float64Type),
        DataType::Decimal128(_, s) => {
            let s = *s;
            let p = a.as_primitive::<Decimal128Type>();
            let scaled = match l {
                Lit::Int(x) if s >= 0 => 10i128
                    .checked_pow(s as u32)
                    .and_then(|m| (*x as i128).checked_mul(m)),
                _ => None,
            };
            for i in 0..n {
                let o = if p.is_null(i) {
                    None
                } else {
                    let v = p.value(i);
                    match (l, scaled) {
                        (Lit::Int(_), Some(x)) => Some(v.cmp(&x)),
                        (Lit::Int(x), None) => {
                            (v as f64 / 10f64.powi(s as i32)).partial_cmp(&(*x as f64))
                        }
                        (Lit::Float(x), _) => (v as f64 / 10f64.powi(s as i32)).partial_cmp(x),
                        _ => None,
                    }
                };
                out.push(f(o));
            }
        }
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            for i in 0..n {
                let o = match l {
                    Lit::Str(x) if !s.is_null(i) => Some(s.value(i).as_bytes().cmp(x.as_bytes())),
                    _ => None,
                };
                out.push(f(o));
            }
        }
        DataType::Boolean => {
            let b = a.as_boolean();
            for i in 0..n {
                let o: Option<Ordering> = match l {
                    Lit::Bool(x) if !b.is_null(i) => Some(b.value(i).cmp(x)),
                    _ => None,
                };
                out.push(f(o));
            }
        }
        _ => out.resize(out.len() + n, f(None)),
    }
}

/// Per output row, what the filter decided.
pub const KEEP: u8 = 0;
pub const DROP: u8 = 1;
/// Kept as a delete of its key.
pub const TO_DELETE: u8 = 2;
/// Set aside (quarantined): on a merged stream, a row the filter fails
/// while it names a column the stream has never had.
pub const SET_ASIDE: u8 = 3;

/// Whether a decision takes the row out of the output.
#[inline]
pub fn gone(d: u8) -> bool {
    d == DROP || d == SET_ASIDE
}

/// The first column `c` names that `col` doesn't find.
fn absent<'c, 'a>(c: &'c Cond, col: &impl Fn(&str) -> Option<&'a ArrayRef>) -> Option<&'c str> {
    match c {
        Cond::Cmp(n, _, _) | Cond::IsNull(n) | Cond::NotNull(n) | Cond::In(n, _) => {
            col(n).is_none().then_some(n.as_str())
        }
        Cond::And(cs) | Cond::Or(cs) => cs.iter().find_map(|x| absent(x, col)),
        Cond::Not(x) => absent(x, col),
    }
}

/// What [`decide`] decided, besides the per-row marks.
#[derive(Debug, Default)]
pub struct Decided {
    /// Rows dropped ([`DROP`]).
    pub dropped: usize,
    /// Whether any row became a delete ([`TO_DELETE`]).
    pub any_delete: bool,
    /// Rows set aside ([`SET_ASIDE`]), and the column that made it so.
    pub set_aside: usize,
    pub absent: Option<String>,
}

/// Evaluates `p`'s filter over `n` rows whose columns `col` finds by
/// source name, into `out`: per row [`KEEP`], [`DROP`] or, on a merged
/// stream, [`TO_DELETE`]. Deletes (`ops`) always pass.
///
/// On a merged stream whose filter names a column the rows don't have
/// (the stream has never had it: a document stream's output has every
/// column it ever had), a row that fails is [`SET_ASIDE`], not turned
/// into a delete: a misspelt column would otherwise delete every key the
/// stream updates.
pub fn decide<'a>(
    p: &Policies,
    n: usize,
    col: &impl Fn(&str) -> Option<&'a ArrayRef>,
    ops: &[u8],
    out: &mut Vec<u8>,
) -> Decided {
    let Some(f) = &p.filter else {
        out.clear();
        out.resize(n, KEEP);
        return Decided::default();
    };
    eval(f, n, col, out);
    let mut d = Decided {
        absent: if p.merge {
            absent(f, col).map(str::to_string)
        } else {
            None
        },
        ..Decided::default()
    };
    for (m, &op) in out.iter_mut().zip(ops) {
        *m = if *m == T || op == meta::OP_DELETE {
            KEEP
        } else if p.merge && d.absent.is_some() {
            d.set_aside += 1;
            SET_ASIDE
        } else if p.merge {
            d.any_delete = true;
            TO_DELETE
        } else {
            d.dropped += 1;
            DROP
        };
    }
    d
}
