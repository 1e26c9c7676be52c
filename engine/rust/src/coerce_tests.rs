//! Table tests for value coercion.
use super::*;
use crate::decl::{Decl, Types};

fn c(types: Types, ty: &str, text: &str) -> Result<Val, Reason> {
    let d = Decl::parse(types, ty).unwrap();
    let (mut a, mut e, mut s) = (Vec::new(), Vec::new(), Vec::new());
    coerce(&d, text.as_bytes(), Src::Payload(0), &mut a, &mut e, &mut s).map_err(|r| r.reason)
}
fn pg(ty: &str, text: &str) -> Result<Val, Reason> {
    c(Types::Postgres, ty, text)
}
fn my(ty: &str, text: &str) -> Result<Val, Reason> {
    c(Types::MySql, ty, text)
}
use Reason::{OutOfRange as R, TypeConflict as T};

#[test]
fn integers() {
    assert_eq!(pg("int2", "-32768"), Ok(Val::I(-32768)));
    assert_eq!(pg("int2", "32768"), Err(R));
    assert_eq!(pg("int4", "2147483647"), Ok(Val::I(2147483647)));
    assert_eq!(pg("int4", "2147483648"), Err(R));
    assert_eq!(pg("int8", "-9223372036854775808"), Ok(Val::I(i64::MIN)));
    assert_eq!(pg("int8", "9223372036854775808"), Err(R));
    assert_eq!(pg("int8", "99999999999999999999999999"), Err(R));
    assert_eq!(pg("int4", "12a"), Err(T));
    assert_eq!(pg("int4", ""), Err(T));
    assert_eq!(pg("int4", "1.5"), Err(T));
    assert_eq!(
        my("bigint unsigned", "18446744073709551615"),
        Ok(Val::U(u64::MAX))
    );
    assert_eq!(my("bigint unsigned", "18446744073709551616"), Err(R));
    assert_eq!(my("bigint unsigned", "-1"), Err(R));
    assert_eq!(my("tinyint unsigned", "255"), Ok(Val::U(255)));
    assert_eq!(my("tinyint unsigned", "256"), Err(R));
    assert_eq!(my("tinyint", "-128"), Ok(Val::I(-128)));
    assert_eq!(my("bit(64)", "18446744073709551615"), Ok(Val::U(u64::MAX)));
    assert_eq!(my("year", "2024"), Ok(Val::I(2024)));
}

#[test]
fn floats() {
    assert_eq!(pg("float8", "1.5"), Ok(Val::F(1.5)));
    assert_eq!(pg("float8", "-Infinity"), Ok(Val::F(f64::NEG_INFINITY)));
    assert!(matches!(pg("float8", "NaN"), Ok(Val::F(v)) if v.is_nan()));
    assert_eq!(pg("float8", "1e400"), Err(R));
    assert_eq!(pg("float4", "1e39"), Err(R));
    assert_eq!(pg("float4", "0.1"), Ok(Val::F(f64::from(0.1f32))));
    assert_eq!(pg("float8", "abc"), Err(T));
    assert_eq!(my("double", "2.5"), Ok(Val::F(2.5)));
}

#[test]
fn decimals() {
    assert_eq!(pg("numeric(10,2)", "123.45"), Ok(Val::D(12345)));
    assert_eq!(pg("numeric(10,2)", "-123.4"), Ok(Val::D(-12340)));
    assert_eq!(pg("numeric(10,2)", "123.450"), Ok(Val::D(12345)));
    assert_eq!(pg("numeric(10,2)", "123.456"), Err(R));
    assert_eq!(pg("numeric(4,2)", "123.4"), Err(R));
    assert_eq!(pg("numeric(4,2)", "00012.34"), Ok(Val::D(1234)));
    assert_eq!(pg("numeric(10,2)", "NaN"), Err(R));
    assert_eq!(pg("numeric(10,2)", "1e5"), Err(T));
    assert_eq!(
        pg("numeric(38,0)", "99999999999999999999999999999999999999"),
        Ok(Val::D(99999999999999999999999999999999999999))
    );
    assert_eq!(
        pg("numeric(38,0)", "100000000000000000000000000000000000000"),
        Err(R)
    );
    assert_eq!(my("decimal(20,4)", "-0.0001"), Ok(Val::D(-1)));
    assert_eq!(my("decimal(20,4) unsigned", "-1"), Err(R));
    assert!(matches!(
        pg("numeric", "1234567890.0123456789012345678901234567890"),
        Ok(Val::Text { .. })
    ));
    assert!(matches!(pg("numeric", "NaN"), Ok(Val::Text { .. })));
    assert_eq!(pg("numeric", "1.2.3"), Err(T));
}

#[test]
fn times() {
    assert_eq!(pg("date", "1970-01-02"), Ok(Val::I(1)));
    assert_eq!(pg("date", "2000-02-29"), Ok(Val::I(11016)));
    assert_eq!(pg("date", "2001-02-29"), Err(T));
    assert_eq!(
        pg("date", "0001-01-01 BC"),
        Ok(Val::I(days_from_civil(0, 1, 1)))
    );
    assert_eq!(pg("date", "infinity"), Err(R));
    assert_eq!(my("date", "0000-00-00"), Err(R));
    assert_eq!(pg("time", "01:02:03.5"), Ok(Val::I(3_723_500_000)));
    assert_eq!(pg("time", "24:00:00"), Err(R));
    assert_eq!(pg("time", "01:02:03.1234567"), Err(R));
    assert_eq!(my("time", "-838:59:59"), Ok(Val::I(-3_020_399_000_000)));
    assert_eq!(
        pg("timestamp", "1970-01-01 00:00:01.000001"),
        Ok(Val::I(1_000_001))
    );
    assert_eq!(pg("timestamp", "1970-01-01 00:00:01+00"), Err(T));
    assert_eq!(pg("timestamptz", "1970-01-01 02:00:00+02"), Ok(Val::I(0)));
    assert_eq!(
        pg("timestamptz", "1970-01-01 00:00:00-05:30"),
        Ok(Val::I(19_800_000_000))
    );
    assert_eq!(pg("timestamptz", "1970-01-01T00:00:00Z"), Ok(Val::I(0)));
    assert_eq!(pg("timestamptz", "infinity"), Err(R));
    assert_eq!(
        my("timestamp", "1970-01-01 00:00:10"),
        Ok(Val::I(10_000_000))
    );
    assert!(matches!(
        pg("timetz", "01:02:03+05:30"),
        Ok(Val::Text { .. })
    ));
    assert_eq!(pg("timetz", "01:02:03"), Err(T));
    // Postgres accepts 24:00:00 for time and timetz: timetz keeps its
    // text; time64[us] can't hold it.
    assert!(matches!(
        pg("timetz", "24:00:00-15:59"),
        Ok(Val::Text { .. })
    ));
    assert!(matches!(pg("timetz", "24:00:00+00"), Ok(Val::Text { .. })));
    assert_eq!(pg("timetz", "24:00:01+00"), Err(R));
    assert_eq!(pg("time", "24:00:00"), Err(R));
}

#[test]
fn rfc3339() {
    assert_eq!(rfc3339_micros(b"1970-01-01T00:00:01Z"), Some(1_000_000));
    assert_eq!(
        rfc3339_micros(b"1970-01-01T02:00:00.5+02:00"),
        Some(500_000)
    );
    assert_eq!(rfc3339_micros(b"1970-01-01t00:00:00z"), Some(0));
    assert_eq!(rfc3339_micros(b"1970-01-01T00:00:00"), None);
    assert_eq!(rfc3339_micros(b"1970-01-01T00:00Z"), None);
    assert_eq!(rfc3339_micros(b"1970-01-01T00:00:00.1234567Z"), None);
    assert_eq!(rfc3339_micros(b"2023-02-29T00:00:00Z"), None);
    assert_eq!(rfc3339_micros(b"hello there, general kenobi"), None);
}

#[test]
fn intervals() {
    assert_eq!(
        pg("interval", "1 year 2 mons -3 days +04:05:06.789"),
        Ok(Val::Iv {
            months: 14,
            days: -3,
            nanos: 14_706_789_000_000
        })
    );
    assert_eq!(
        pg("interval", "-00:00:01"),
        Ok(Val::Iv {
            months: 0,
            days: 0,
            nanos: -1_000_000_000
        })
    );
    assert_eq!(pg("interval", "1 fortnight"), Err(T));
}

#[test]
fn other_types() {
    assert_eq!(pg("bool", "t"), Ok(Val::B(true)));
    assert_eq!(pg("bool", "maybe"), Err(T));
    assert_eq!(
        pg("uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        Ok(Val::Uuid(0xa0eebc999c0b4ef8bb6d6bb9bd380a11))
    );
    assert_eq!(pg("uuid", "a0eebc99-9c0b-4ef8-bb6d"), Err(T));
    assert!(matches!(
        pg("bytea", "\\x00ff"),
        Ok(Val::Text {
            arena: true,
            start: 0,
            end: 2
        })
    ));
    assert_eq!(pg("bytea", "\\x0"), Err(T));
    assert_eq!(pg("bytea", "abc"), Err(T));
    assert!(matches!(
        pg("jsonb", r#"{"a":[1,2]}"#),
        Ok(Val::Text { .. })
    ));
    assert_eq!(pg("jsonb", r#"{"a":"#), Err(T));
    assert!(matches!(my("json", "[1]"), Ok(Val::Text { .. })));
}

#[test]
fn arrays() {
    let d = Decl::parse(Types::Postgres, "_int4").unwrap();
    let (mut a, mut e, mut s) = (Vec::new(), Vec::new(), Vec::new());
    let v = coerce(
        &d,
        b"{1,2,NULL, 4}",
        Src::Payload(0),
        &mut a,
        &mut e,
        &mut s,
    )
    .unwrap();
    assert_eq!(v, Val::List { start: 0, end: 4 });
    assert_eq!(e, vec![Val::I(1), Val::I(2), Val::Null, Val::I(4)]);
    let d = Decl::parse(Types::Postgres, "text[]").unwrap();
    let (mut a, mut e) = (Vec::new(), Vec::new());
    let text = br#"{"a b","c\"d",plain,"NULL"}"#;
    coerce(&d, text, Src::Payload(100), &mut a, &mut e, &mut s).unwrap();
    assert_eq!(e.len(), 4);
    assert_eq!(
        e[2],
        Val::Text {
            arena: false,
            start: 100 + 14,
            end: 100 + 19
        }
    );
    assert_eq!(&text[14..19], b"plain");
    assert_eq!(std::str::from_utf8(&a).unwrap(), "a bc\"dNULL");
    assert_eq!(pg("_int4", "{{1,2},{3,4}}"), Err(T));
    assert_eq!(pg("_int4", "[0:1]={1,2}"), Err(T));
    assert_eq!(pg("_int4", "{1,99999999999}"), Err(R));
    assert_eq!(pg("_int4", "{}"), Ok(Val::List { start: 0, end: 0 }));
}
