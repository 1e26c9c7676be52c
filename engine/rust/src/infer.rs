//! Type inference for JSON documents: each value has a [`Kind`], each column
//! a [`ColumnType`], and a column's type only ever widens.
//!
//! The lattice is `null → bool → int64 → float64 → utf8`, with two shortcuts
//! to utf8: a bool meeting a number, and any value that only text can hold
//! exactly (strings, nested objects and arrays as their JSON text, integers
//! beyond i64 and numbers beyond f64, kept as written). Structs and lists
//! arrive with the full-engine issue; until then nested values are utf8.

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
    /// A number no numeric type here holds exactly: kept as its text.
    BigNum,
    /// A string.
    Text,
    /// An object or array: kept as its JSON text.
    Nested,
}

impl Kind {
    /// The narrowest column type that holds a value of this kind.
    pub fn column_type(self) -> ColumnType {
        match self {
            Kind::Null => ColumnType::Null,
            Kind::Bool => ColumnType::Bool,
            Kind::Int => ColumnType::Int64,
            Kind::Float => ColumnType::Float64,
            Kind::BigNum | Kind::Text | Kind::Nested => ColumnType::Utf8,
        }
    }
}

/// The type of an inferred column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ColumnType {
    Null,
    Bool,
    Int64,
    Float64,
    Utf8,
}

impl ColumnType {
    /// The smallest type that holds every value of both.
    pub fn widen(self, other: ColumnType) -> ColumnType {
        use ColumnType::*;
        match (self, other) {
            (a, b) if a == b => a,
            (Null, x) | (x, Null) => x,
            (Utf8, _) | (_, Utf8) => Utf8,
            (Bool, _) | (_, Bool) => Utf8,
            // Only Int64 and Float64 are left.
            _ => Float64,
        }
    }

    /// The Arrow type of the column.
    pub fn data_type(self) -> DataType {
        match self {
            ColumnType::Null => DataType::Null,
            ColumnType::Bool => DataType::Boolean,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::Float64 => DataType::Float64,
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
        let all = [Null, Bool, Int64, Float64, Utf8];
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
        for t in [Null, Bool, Int64, Float64, Utf8] {
            assert_eq!(ColumnType::from_name(t.name()), Some(t));
        }
        assert_eq!(ColumnType::from_name("int32"), None);
    }
}
