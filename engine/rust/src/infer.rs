//! Type inference for JSON documents: each value has a [`Kind`], each column
//! a [`ColumnType`], and a column's type only ever widens.
//!
//! The lattice: null widens to anything; int64 and float64 join to float64;
//! any other pair of different types joins to utf8 (a bool meeting a
//! number, a timestamp meeting a plain string, a struct meeting a scalar).
//! Strings, integers beyond i64 and numbers beyond f64 are utf8, kept as
//! written. Objects and arrays are a `Nested` column whose shape is a
//! [`crate::nested::JType`] tree that widens by the same rules.

use arrow_schema::DataType;

/// What one JSON value is, as far as inference cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Null,
    Bool,
    /// An integer that fits i64.
    Int,
    /// A number with a fraction or exponent that fits a finite f64.
    Float,
    /// A number without exponent that float64 can't be trusted to hold
    /// (beyond int64, or more than 15 significant digits) and that has at
    /// most 38 digits; `num` is its shape (`json::decimal_shape`).
    Decimal,
    /// A number no numeric type here holds exactly: kept as its text.
    BigNum,
    /// A string.
    Text,
    /// An object or array: a struct or list column, or its JSON text.
    Nested,
    /// A string holding an RFC 3339 timestamp, when the stream asks for
    /// timestamps; `num` is microseconds since the epoch, UTC.
    Timestamp,
}

impl Kind {
    /// The narrowest column type that holds a value of this kind and
    /// `num` (nested values as structs and lists).
    pub fn column_type_of(self, num: u64) -> ColumnType {
        match self {
            Kind::Decimal => ColumnType::Decimal {
                scale: (num & 0xff) as u8,
                int_digits: ((num >> 8) & 0xff) as u8,
            },
            k => k.column_type(),
        }
    }

    /// The narrowest column type that holds a value of this kind (nested
    /// values as structs and lists; decimals at their smallest shape).
    pub fn column_type(self) -> ColumnType {
        match self {
            Kind::Decimal => ColumnType::Decimal {
                scale: 0,
                int_digits: 0,
            },
            Kind::Null => ColumnType::Null,
            Kind::Bool => ColumnType::Bool,
            Kind::Int => ColumnType::Int64,
            Kind::Float => ColumnType::Float64,
            Kind::Timestamp => ColumnType::Timestamp,
            Kind::Nested => ColumnType::Nested,
            Kind::BigNum | Kind::Text => ColumnType::Utf8,
        }
    }

    /// As [`Kind::column_type`], with nested values as JSON text when
    /// `nested_text`.
    #[inline]
    pub fn column_type_with(self, num: u64, nested_text: bool) -> ColumnType {
        if nested_text && self == Kind::Nested {
            ColumnType::Utf8
        } else {
            self.column_type_of(num)
        }
    }
}

/// A decimal column type, or utf8 when 38 digits can't hold it.
fn decimal(scale: u8, int_digits: u8) -> ColumnType {
    if u16::from(scale) + u16::from(int_digits) <= 38 {
        ColumnType::Decimal { scale, int_digits }
    } else {
        ColumnType::Utf8
    }
}

/// The type of an inferred column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ColumnType {
    Null,
    Bool,
    Int64,
    Float64,
    /// decimal128(38, scale); `int_digits` is the most integer digits seen
    /// (scale + int_digits ≤ 38).
    Decimal {
        scale: u8,
        int_digits: u8,
    },
    /// timestamp[us, UTC] (RFC 3339 strings, when the stream asks).
    Timestamp,
    /// A struct or list; its shape is the column's `JType` tree.
    Nested,
    Utf8,
}

impl ColumnType {
    /// The smallest type that holds every value of both.
    #[inline]
    pub fn widen(self, other: ColumnType) -> ColumnType {
        use ColumnType::*;
        match (self, other) {
            (a, b) if a == b => a,
            (Null, x) | (x, Null) => x,
            (Int64, Float64) | (Float64, Int64) => Float64,
            (
                Decimal {
                    scale: s1,
                    int_digits: i1,
                },
                Decimal {
                    scale: s2,
                    int_digits: i2,
                },
            ) => decimal(s1.max(s2), i1.max(i2)),
            // An int64 has up to 19 integer digits.
            (Int64, Decimal { scale, int_digits }) | (Decimal { scale, int_digits }, Int64) => {
                decimal(scale, int_digits.max(19))
            }
            _ => Utf8,
        }
    }

    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnType::Null => DataType::Null,
            ColumnType::Bool => DataType::Boolean,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Decimal { scale, .. } => DataType::Decimal128(38, scale as i8),
            ColumnType::Timestamp => {
                DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into()))
            }
            // The real type is the column's tree (state::Column::data_type).
            ColumnType::Nested => DataType::Null,
            ColumnType::Utf8 => DataType::Utf8,
        }
    }

    /// The name used in the saved state.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Null => "null",
            ColumnType::Bool => "bool",
            ColumnType::Int64 => "int64",
            ColumnType::Float64 => "float64",
            ColumnType::Decimal { .. } => "decimal",
            ColumnType::Timestamp => "timestamp",
            ColumnType::Nested => "nested",
            ColumnType::Utf8 => "utf8",
        }
    }

    /// Parses a name written by [`ColumnType::name`].
    pub fn from_name(name: &str) -> Option<ColumnType> {
        Some(match name {
            "null" => ColumnType::Null,
            "bool" => ColumnType::Bool,
            "int64" => ColumnType::Int64,
            "float64" => ColumnType::Float64,
            "timestamp" => ColumnType::Timestamp,
            "nested" => ColumnType::Nested,
            "utf8" => ColumnType::Utf8,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ColumnType::*;
    use super::*;

    #[test]
    fn widen_is_a_join() {
        let d = |scale, int_digits| Decimal { scale, int_digits };
        let all = [
            Null,
            Bool,
            Int64,
            Float64,
            Timestamp,
            Nested,
            Utf8,
            d(0, 20),
            d(2, 16),
            d(20, 10),
            d(18, 19),
            d(0, 38),
        ];
        for a in all {
            for b in all {
                let w = a.widen(b);
                assert_eq!(w, b.widen(a), "commutative {a:?} {b:?}");
                assert_eq!(w.widen(a), w, "absorbs {a:?}");
                assert_eq!(w.widen(b), w, "absorbs {b:?}");
                for c in all {
                    assert_eq!(a.widen(b).widen(c), a.widen(b.widen(c)), "associative");
                }
            }
        }
        assert_eq!(Int64.widen(Float64), Float64);
        assert_eq!(Bool.widen(Int64), Utf8);
        assert_eq!(Bool.widen(Float64), Utf8);
        assert_eq!(Null.widen(Bool), Bool);
        assert_eq!(Float64.widen(Int64), Float64);
    }

    #[test]
    fn names_round_trip() {
        for t in [Null, Bool, Int64, Float64, Timestamp, Nested, Utf8] {
            assert_eq!(ColumnType::from_name(t.name()), Some(t));
        }
        assert_eq!(
            Int64.widen(Decimal {
                scale: 20,
                int_digits: 10
            }),
            Utf8
        );
        assert_eq!(
            Int64.widen(Decimal {
                scale: 2,
                int_digits: 1
            }),
            Decimal {
                scale: 2,
                int_digits: 19
            }
        );
        assert_eq!(ColumnType::from_name("int32"), None);
    }
}
