//! Declared column types: a source's type name (Postgres or MySQL, as its
//! catalog spells it) mapped to the exact Arrow type its values are coerced
//! to. The table is in the Go package doc (engine/engine.go); keep both in
//! step.

use std::sync::Arc;

use arrow_schema::{DataType, Field, IntervalUnit, TimeUnit};

/// The Arrow field metadata key that marks a declared column's logical
/// type where its Arrow type alone does not say it. Only enum columns have
/// it, with the value [`ENUM`]; every other field has no metadata.
pub const LOGICAL_TYPE_KEY: &str = "openetl.logical_type";
/// The [`LOGICAL_TYPE_KEY`] value of an enum column. It names no labels,
/// so adding a label to the source's enum changes no schema.
pub const ENUM: &str = "enum";

/// The type systems a declared stream's type names come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Types {
    Postgres,
    MySql,
}

impl Types {
    pub fn from_name(s: &str) -> Option<Types> {
        match s {
            "" | "postgres" => Some(Types::Postgres),
            "mysql" => Some(Types::MySql),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Types::Postgres => "postgres",
            Types::MySql => "mysql",
        }
    }
}

/// What a declared column's values are coerced to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decl {
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float32,
    Float64,
    /// decimal128(p, s); `unsigned` refuses negative values (MySQL).
    Decimal {
        p: u8,
        s: i8,
        unsigned: bool,
    },
    /// Postgres numeric without precision, or any decimal wider than 38
    /// digits: utf8 holding the number's exact
    /// text (validated), since no fixed scale holds every value.
    NumericText,
    Bool,
    Utf8,
    /// An enum (`enum('a','b')`, as MySQL spells it and the Postgres
    /// source declares its enum types): utf8 holding the label, any label
    /// (labels added while streaming are taken), marked in the field
    /// metadata ([`LOGICAL_TYPE_KEY`]).
    Enum,
    /// json/jsonb: utf8 holding the JSON text (validated).
    Json,
    /// binary; `hex`: the text form is Postgres bytea hex (`\x0a1b`),
    /// otherwise the value's bytes are taken as they are (MySQL blobs).
    Binary {
        hex: bool,
    },
    /// date32
    Date,
    /// time64[us]
    Time,
    /// Postgres timetz: utf8 holding the validated source text (a time of
    /// day with an offset has no Arrow type; converting it to UTC would
    /// change the time of day).
    TimeTz,
    /// duration[us] (MySQL time, a signed span up to 838:59:59).
    Duration,
    /// timestamp[us]
    Timestamp,
    /// timestamp[us, UTC], converted from the text's offset.
    TimestampTz,
    /// interval month_day_nano
    Interval,
    /// fixed_size_binary(16)
    Uuid,
    /// list of the element type (Postgres one-dimensional arrays).
    List(Box<Decl>),
}

impl Decl {
    pub fn data_type(&self) -> DataType {
        match self {
            Decl::Int8 => DataType::Int8,
            Decl::Int16 => DataType::Int16,
            Decl::Int32 => DataType::Int32,
            Decl::Int64 => DataType::Int64,
            Decl::UInt8 => DataType::UInt8,
            Decl::UInt16 => DataType::UInt16,
            Decl::UInt32 => DataType::UInt32,
            Decl::UInt64 => DataType::UInt64,
            Decl::Float32 => DataType::Float32,
            Decl::Float64 => DataType::Float64,
            Decl::Decimal { p, s, .. } => DataType::Decimal128(*p, *s),
            Decl::NumericText | Decl::Utf8 | Decl::Enum | Decl::Json | Decl::TimeTz => {
                DataType::Utf8
            }
            Decl::Bool => DataType::Boolean,
            Decl::Binary { .. } => DataType::Binary,
            Decl::Date => DataType::Date32,
            Decl::Time => DataType::Time64(TimeUnit::Microsecond),
            Decl::Duration => DataType::Duration(TimeUnit::Microsecond),
            Decl::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Decl::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Decl::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            Decl::Uuid => DataType::FixedSizeBinary(16),
            Decl::List(e) => DataType::List(Arc::new(Field::new("item", e.data_type(), true))),
        }
    }

    /// The Arrow field of a declared column named `name`: nullable, with
    /// metadata only for enums.
    pub fn field(&self, name: &str) -> Field {
        let f = Field::new(name, self.data_type(), true);
        match self {
            Decl::Enum => f.with_metadata([(LOGICAL_TYPE_KEY, ENUM)]),
            _ => f,
        }
    }

    /// Parses a source type name. Names this table does not know become
    /// utf8 holding the source's text form (Postgres inet, money, ranges,
    /// user types declared by name; MySQL set, geometry...). `enum(...)`
    /// is an enum in both type systems, whatever its labels. Errors are for
    /// names it knows with modifiers it can't honour (precision over 38).
    pub fn parse(types: Types, name: &str) -> Result<Decl, String> {
        let lower = name.trim().to_ascii_lowercase();
        // Labels may hold any character: look at nothing past "enum(".
        if lower.starts_with("enum(") && lower.ends_with(')') {
            return Ok(Decl::Enum);
        }
        if types == Types::Postgres {
            if let Some(elem) = lower.strip_suffix("[]") {
                return Ok(Decl::List(Box::new(Decl::parse(types, elem)?)));
            }
            if let Some(elem) = lower.strip_prefix('_') {
                return Ok(Decl::List(Box::new(Decl::parse(types, elem)?)));
            }
        }
        // Split "numeric(10,2)" / "timestamp(3) with time zone" /
        // "bigint(20) unsigned zerofill" into base words and arguments.
        let (mut base, mut args) = (String::new(), String::new());
        let mut depth = 0;
        for ch in lower.chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                c if depth > 0 => args.push(c),
                c => base.push(c),
            }
        }
        let words: Vec<&str> = base
            .split_whitespace()
            .filter(|w| *w != "zerofill")
            .collect();
        let unsigned = words.contains(&"unsigned");
        let words: Vec<&str> = words
            .into_iter()
            .filter(|w| *w != "unsigned" && *w != "signed")
            .collect();
        let base = words.join(" ");
        let nums: Vec<i64> = args
            .split(',')
            .filter_map(|a| a.trim().parse::<i64>().ok())
            .collect();
        let decimal = |default: Option<(i64, i64)>| -> Result<Decl, String> {
            let (p, s) = match (nums.first(), nums.get(1)) {
                (Some(&p), Some(&s)) => (p, s),
                (Some(&p), None) => (p, 0),
                _ => match default {
                    Some(d) => d,
                    None => return Ok(Decl::NumericText),
                },
            };
            if p < 1 || s < 0 || s > p {
                return Err(format!(
                    "{name:?}: precision {p} and scale {s} are not a decimal type"
                ));
            }
            if p > 38 {
                // decimal128 holds 38 digits: keep wider decimals exact as text.
                return Ok(Decl::NumericText);
            }
            Ok(Decl::Decimal {
                p: p as u8,
                s: s as i8,
                unsigned,
            })
        };
        Ok(match types {
            Types::Postgres => match base.as_str() {
                "int2" | "smallint" | "smallserial" | "serial2" => Decl::Int16,
                "int4" | "int" | "integer" | "serial" | "serial4" => Decl::Int32,
                "int8" | "bigint" | "bigserial" | "serial8" => Decl::Int64,
                "float4" | "real" => Decl::Float32,
                "float8" | "double precision" => Decl::Float64,
                "float" => match nums.first() {
                    Some(&p) if p <= 24 => Decl::Float32,
                    _ => Decl::Float64,
                },
                "numeric" | "decimal" => decimal(None)?,
                "bool" | "boolean" => Decl::Bool,
                "text" | "varchar" | "character varying" | "char" | "character" | "bpchar"
                | "name" | "citext" => Decl::Utf8,
                "bytea" => Decl::Binary { hex: true },
                "date" => Decl::Date,
                "time" | "time without time zone" => Decl::Time,
                "timetz" | "time with time zone" => Decl::TimeTz,
                "timestamp" | "timestamp without time zone" => Decl::Timestamp,
                "timestamptz" | "timestamp with time zone" => Decl::TimestampTz,
                "interval" => Decl::Interval,
                "uuid" => Decl::Uuid,
                "json" | "jsonb" => Decl::Json,
                _ => Decl::Utf8,
            },
            Types::MySql => match base.as_str() {
                "tinyint" if unsigned => Decl::UInt8,
                "tinyint" => Decl::Int8,
                "smallint" if unsigned => Decl::UInt16,
                "smallint" => Decl::Int16,
                "mediumint" | "int" | "integer" if unsigned => Decl::UInt32,
                "mediumint" | "int" | "integer" => Decl::Int32,
                "bigint" if unsigned => Decl::UInt64,
                "bigint" => Decl::Int64,
                "float" => match nums.first() {
                    Some(&p) if p > 24 => Decl::Float64,
                    _ => Decl::Float32,
                },
                "double" | "double precision" | "real" => Decl::Float64,
                "decimal" | "numeric" | "dec" | "fixed" => decimal(Some((10, 0)))?,
                "bit" => Decl::UInt64,
                "bool" | "boolean" => Decl::Bool,
                "date" => Decl::Date,
                "datetime" => Decl::Timestamp,
                "timestamp" => Decl::TimestampTz,
                "time" => Decl::Duration,
                "year" => Decl::Int16,
                "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                    Decl::Binary { hex: false }
                }
                "json" => Decl::Json,
                _ => Decl::Utf8,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_table() {
        use Types::*;
        let d = |p: u8, s: i8| Decl::Decimal {
            p,
            s,
            unsigned: false,
        };
        let cases: Vec<(Types, &str, Decl)> = vec![
            (Postgres, "int2", Decl::Int16),
            (Postgres, "int4", Decl::Int32),
            (Postgres, "integer", Decl::Int32),
            (Postgres, "int8", Decl::Int64),
            (Postgres, "float4", Decl::Float32),
            (Postgres, "double precision", Decl::Float64),
            (Postgres, "numeric(10,2)", d(10, 2)),
            (Postgres, "numeric(38)", d(38, 0)),
            (Postgres, "numeric", Decl::NumericText),
            (Postgres, "bool", Decl::Bool),
            (Postgres, "character varying(20)", Decl::Utf8),
            (Postgres, "bpchar", Decl::Utf8),
            (Postgres, "bytea", Decl::Binary { hex: true }),
            (Postgres, "date", Decl::Date),
            (Postgres, "time", Decl::Time),
            (Postgres, "timetz", Decl::TimeTz),
            (Postgres, "timestamp(3) without time zone", Decl::Timestamp),
            (Postgres, "timestamptz", Decl::TimestampTz),
            (Postgres, "timestamp with time zone", Decl::TimestampTz),
            (Postgres, "interval", Decl::Interval),
            (Postgres, "uuid", Decl::Uuid),
            (Postgres, "jsonb", Decl::Json),
            (Postgres, "mood", Decl::Utf8),
            (Postgres, "_int4", Decl::List(Box::new(Decl::Int32))),
            (Postgres, "text[]", Decl::List(Box::new(Decl::Utf8))),
            (MySql, "tinyint(1)", Decl::Int8),
            (MySql, "int(11) unsigned", Decl::UInt32),
            (MySql, "bigint unsigned", Decl::UInt64),
            (MySql, "bigint(20) unsigned zerofill", Decl::UInt64),
            (MySql, "bigint", Decl::Int64),
            (MySql, "decimal(20,4)", d(20, 4)),
            (MySql, "decimal", d(10, 0)),
            (MySql, "float", Decl::Float32),
            (MySql, "double", Decl::Float64),
            (MySql, "bit(8)", Decl::UInt64),
            (MySql, "datetime(6)", Decl::Timestamp),
            (MySql, "timestamp", Decl::TimestampTz),
            (MySql, "time", Decl::Duration),
            (MySql, "year", Decl::Int16),
            (MySql, "longblob", Decl::Binary { hex: false }),
            (MySql, "enum('a','b')", Decl::Enum),
            (MySql, "ENUM('x,y','(z)')", Decl::Enum),
            (MySql, "enum('')", Decl::Enum),
            (Postgres, "enum('sad','ok','it''s')", Decl::Enum),
            (Postgres, "enum", Decl::Utf8),
            (Postgres, "_mood", Decl::List(Box::new(Decl::Utf8))),
            (MySql, "set('a','b')", Decl::Utf8),
            (MySql, "json", Decl::Json),
        ];
        for (t, name, want) in cases {
            assert_eq!(Decl::parse(t, name).unwrap(), want, "{name}");
        }
        assert_eq!(
            Decl::parse(Postgres, "numeric(40,2)").unwrap(),
            Decl::NumericText
        );
        assert_eq!(
            Decl::parse(MySql, "decimal(65,30)").unwrap(),
            Decl::NumericText
        );
        assert!(Decl::parse(Postgres, "numeric(4,6)").is_err());
        // Only enums carry field metadata, and it names no labels.
        let f = Decl::Enum.field("mood");
        assert_eq!(f.data_type(), &DataType::Utf8);
        assert!(f.is_nullable());
        assert_eq!(
            f.metadata().get(LOGICAL_TYPE_KEY).map(String::as_str),
            Some(ENUM)
        );
        assert_eq!(f.metadata().len(), 1);
        assert!(Decl::Utf8.field("t").metadata().is_empty());
        assert!(Decl::Json.field("j").metadata().is_empty());
        assert_eq!(
            Decl::parse(MySql, "decimal(10,2) unsigned").unwrap(),
            Decl::Decimal {
                p: 10,
                s: 2,
                unsigned: true
            }
        );
    }
}
