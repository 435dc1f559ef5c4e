//! Partition values of existing files, never guessed.
//!
//! With a location prefix, a file's values come from the Hive-style directories between the
//! prefix and the file (`region=eu/ts_day=2026-11-29/f.parquet`), each named after a
//! partition field (an identity field may also go by its source column's name). Values are
//! read as Java and iceberg-rust print them: `2026` or the year offset `56` for `year`,
//! `2026-11` for `month`, `2026-11-29` for `day`, `2026-11-29-10` for `hour`, the bucket
//! number, the (truncated) value itself; `null` or `__HIVE_DEFAULT_PARTITION__` for null.
//!
//! A field without a directory takes its value from the footer's bounds of the source
//! column, only when they prove it: exact bounds, a known null count, and both bounds mapping
//! to the same value (for `bucket`, which does not preserve order, the bounds must be
//! equal). A path value the bounds contradict is an error too: registering the file under
//! it would hide rows from queries that prune by partition.

use iceberg::spec::{
    Datum, Literal, PartitionSpec, PrimitiveLiteral, PrimitiveType, Schema as IcebergSchema, Struct,
    Transform, Type,
};
use iceberg::transform::create_transform_function;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::footer::FileFacts;
use super::metrics::{Resolved, to_datum};

/// What the footer proves about a partition field.
enum Derived {
    /// Every row has this value.
    Value(Option<Datum>),
    /// The rows have several values; the text says which.
    Spans(String),
    /// The footer cannot say.
    Unknown(String),
}

/// The partition values of a file under `spec`, or why they cannot be known.
pub(crate) fn partition_of(
    facts: &FileFacts,
    resolved: &[Option<Resolved>],
    spec: &PartitionSpec,
    schema: &IcebergSchema,
    directories: Option<&[(String, String)]>,
) -> Result<Struct, String> {
    if spec.is_unpartitioned() {
        return Ok(Struct::empty());
    }
    let mut values = Vec::with_capacity(spec.fields().len());
    for field in spec.fields() {
        let source = schema.field_by_id(field.source_id).ok_or_else(|| {
            format!(
                "partition field {}: its source column is gone from the table",
                field.name
            )
        })?;
        let Type::Primitive(source_type) = source.field_type.as_ref() else {
            return Err(format!(
                "partition field {}: its source {} is not a primitive",
                field.name, source.name
            ));
        };
        let result_type = field
            .transform
            .result_type(&source.field_type)
            .map_err(|e| format!("partition field {}: {}", field.name, e.message()))?;
        let Type::Primitive(result_type) = result_type else {
            return Err(format!(
                "partition field {}: the transform yields a nested type",
                field.name
            ));
        };
        let derived = derive(facts, resolved, field.source_id, source_type, field.transform)
            .map_err(|e| format!("partition field {}: {e}", field.name))?;
        let from_path = directories.and_then(|dirs| {
            dirs.iter()
                .find(|(k, _)| {
                    *k == field.name || (field.transform == Transform::Identity && *k == source.name)
                })
                .map(|(k, v)| (k.clone(), v.clone()))
        });
        let value = match (from_path, derived) {
            (Some((key, text)), derived) => {
                let value = parse_value(&text, field.transform, source_type, &result_type)
                    .map_err(|e| format!("partition field {}: {key}={text} in the path: {e}", field.name))?;
                match derived {
                    Derived::Value(proven) if !same(&proven, &value) => {
                        return Err(format!(
                            "partition field {}: the path says {key}={text}, but the file's {} values map to {}",
                            field.name,
                            source.name,
                            show(&proven)
                        ));
                    }
                    Derived::Spans(what) => {
                        return Err(format!(
                            "partition field {}: the path says {key}={text}, but the file spans partitions ({what})",
                            field.name
                        ));
                    }
                    _ => value,
                }
            }
            (None, Derived::Value(v)) => v,
            (None, Derived::Spans(what)) => {
                return Err(format!(
                    "partition field {}: the file spans partitions ({what})",
                    field.name
                ));
            }
            (None, Derived::Unknown(why)) => {
                return Err(format!(
                    "partition field {}: no statistics: {why}, and no {}=... directory in the path",
                    field.name, field.name
                ));
            }
        };
        values.push(value.map(Literal::from));
    }
    Ok(Struct::from_iter(values))
}

fn same(a: &Option<Datum>, b: &Option<Datum>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.to_bytes().ok() == b.to_bytes().ok() && a.data_type() == b.data_type(),
        _ => false,
    }
}

fn show(v: &Option<Datum>) -> String {
    v.as_ref().map_or_else(|| "null".to_string(), human)
}

/// A value as people read it. iceberg-rust 0.10.1 panics printing some temporal values (an
/// instant before 1970 with a fraction of a second, anything past chrono's range), so those
/// are printed here.
fn human(d: &Datum) -> String {
    use chrono::{DateTime, NaiveDate, NaiveTime, TimeDelta};
    const STAMP: &str = "%Y-%m-%dT%H:%M:%S%.6f";
    match (d.data_type(), d.literal()) {
        (PrimitiveType::Date, PrimitiveLiteral::Int(days)) => NaiveDate::from_ymd_opt(1970, 1, 1)
            .and_then(|epoch| epoch.checked_add_signed(TimeDelta::try_days(*days as i64)?))
            .map_or_else(|| format!("day {days}"), |date| date.to_string()),
        (PrimitiveType::Time, PrimitiveLiteral::Long(us)) => u32::try_from(us.div_euclid(1_000_000))
            .ok()
            .and_then(|s| {
                NaiveTime::from_num_seconds_from_midnight_opt(s, (us.rem_euclid(1_000_000) * 1000) as u32)
            })
            .map_or_else(
                || format!("{us} µs after midnight"),
                |t| t.format("%H:%M:%S%.6f").to_string(),
            ),
        (PrimitiveType::Timestamp | PrimitiveType::Timestamptz, PrimitiveLiteral::Long(us)) => {
            let zone = if d.data_type() == &PrimitiveType::Timestamptz {
                "+00:00"
            } else {
                ""
            };
            DateTime::from_timestamp_micros(*us).map_or_else(
                || format!("{us} µs since 1970"),
                |t| format!("{}{zone}", t.format(STAMP)),
            )
        }
        (PrimitiveType::TimestampNs | PrimitiveType::TimestamptzNs, PrimitiveLiteral::Long(ns)) => {
            DateTime::from_timestamp_nanos(*ns)
                .format("%Y-%m-%dT%H:%M:%S%.9f")
                .to_string()
        }
        _ => {
            catch_unwind(AssertUnwindSafe(|| d.to_string())).unwrap_or_else(|_| format!("{:?}", d.literal()))
        }
    }
}

/// What the footer proves about the value of `transform` over source column `source_id`.
fn derive(
    facts: &FileFacts,
    resolved: &[Option<Resolved>],
    source_id: i32,
    source_type: &PrimitiveType,
    transform: Transform,
) -> Result<Derived, String> {
    if transform == Transform::Void {
        return Ok(Derived::Value(None));
    }
    let leaf = resolved
        .iter()
        .position(|r| r.as_ref().is_some_and(|r| r.id == source_id))
        .map(|i| &facts.schema.leaves[i]);
    // A file without the column reads as null in every row.
    let Some(leaf) = leaf else {
        return Ok(Derived::Value(None));
    };
    let rows = facts.record_count;
    match leaf.null_count {
        None => {
            return Ok(Derived::Unknown(format!(
                "the footer has no null count for {}",
                leaf.path
            )));
        }
        Some(n) if rows == 0 || n >= rows => return Ok(Derived::Value(None)),
        Some(0) => {}
        Some(n) => {
            return Ok(Derived::Spans(format!(
                "{} holds {n} nulls and {} values",
                leaf.path,
                rows - n
            )));
        }
    }
    let bound = |stat: Option<&super::schema::Stat>, upper: bool| {
        stat.and_then(|s| to_datum(s, leaf.encoding, source_type, upper))
            .filter(|(_, exact)| *exact)
            .map(|(d, _)| d)
    };
    let lower = if leaf.lower_exact {
        bound(leaf.lower.as_ref(), false)
    } else {
        None
    };
    let upper = bound(leaf.upper.as_ref(), true);
    let (Some(lower), Some(upper)) = (lower, upper) else {
        return Ok(Derived::Unknown(format!(
            "the footer has no exact min and max for {}",
            leaf.path
        )));
    };
    let function = create_transform_function(&transform).map_err(|e| e.message().to_string())?;
    // iceberg-rust's temporal transforms panic on dates past chrono's range: such a value
    // proves nothing.
    let apply = |d: &Datum| match catch_unwind(AssertUnwindSafe(|| function.transform_literal(d))) {
        Ok(result) => result.map_err(|e| e.message().to_string()),
        Err(_) => Err(format!("{} is out of range for {transform}", human(d))),
    };
    let (low, high) = match (apply(&lower), apply(&upper)) {
        (Ok(low), Ok(high)) => (low, high),
        (Err(why), _) | (_, Err(why)) => return Ok(Derived::Unknown(why)),
    };
    let range = format!("{} from {} to {}", leaf.path, human(&lower), human(&upper));
    if !transform.preserves_order() && !same(&Some(lower.clone()), &Some(upper.clone())) {
        // Values between the bounds may hash anywhere.
        return Ok(Derived::Spans(range));
    }
    if !same(&low, &high) {
        return Ok(Derived::Spans(format!(
            "{range}: {} to {}",
            show(&low),
            show(&high)
        )));
    }
    Ok(Derived::Value(low))
}

/// The Hive-style `key=value` directories between `prefix` and the file, percent-decoded;
/// an error when the file is not under the prefix.
pub(crate) fn directories(location: &str, prefix: &str) -> Result<Vec<(String, String)>, String> {
    let prefix = prefix.trim_end_matches('/');
    let rest = location
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or_else(|| format!("the file is not under the location prefix {prefix}"))?;
    let mut dirs: Vec<&str> = rest.split('/').collect();
    dirs.pop();
    Ok(dirs
        .into_iter()
        .filter_map(|d| d.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect())
}

/// Percent-decoding as Hive and Iceberg escape path values; malformed escapes stay as they are.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A partition value written in a path, as a value of the partition field's type.
fn parse_value(
    text: &str,
    transform: Transform,
    source: &PrimitiveType,
    result: &PrimitiveType,
) -> Result<Option<Datum>, String> {
    if text == "null" || text == "__HIVE_DEFAULT_PARTITION__" {
        return Ok(None);
    }
    let int = |s: &str| s.parse::<i32>().map_err(|_| format!("{s:?} is not a number"));
    let value = match transform {
        Transform::Identity | Transform::Truncate(_) => parse_source(text, source)?,
        Transform::Bucket(_) => Datum::int(int(text)?),
        Transform::Year => Datum::int(match text.split_once('-') {
            None if text.len() == 4 => int(text)? - 1970,
            _ => int(text)?,
        }),
        Transform::Month => Datum::int(match text.split_once('-') {
            Some((y, m)) if y.len() == 4 => {
                let month = int(m)?;
                if !(1..=12).contains(&month) {
                    return Err(format!("{text:?} is not a month"));
                }
                (int(y)? - 1970) * 12 + month - 1
            }
            _ => int(text)?,
        }),
        Transform::Day => {
            if text.contains('-') && !text.starts_with('-') {
                Datum::date_from_str(text).map_err(|e| e.message().to_string())?
            } else {
                Datum::date(int(text)?)
            }
        }
        Transform::Hour => Datum::int(match text.rsplit_once('-') {
            Some((day, hour)) if day.len() == 10 => {
                let date = Datum::date_from_str(day).map_err(|e| e.message().to_string())?;
                let PrimitiveLiteral::Int(days) = date.literal() else {
                    return Err(format!("{text:?} is not an hour"));
                };
                let hour = int(hour)?;
                if !(0..24).contains(&hour) {
                    return Err(format!("{text:?} is not an hour"));
                }
                days.checked_mul(24)
                    .and_then(|h| h.checked_add(hour))
                    .ok_or("out of range")?
            }
            _ => int(text)?,
        }),
        Transform::Void => return Ok(None),
        Transform::Unknown => return Err("the transform is unknown".into()),
    };
    if value.data_type() != result {
        return Err(format!(
            "a {} does not fit the partition's {result}",
            value.data_type()
        ));
    }
    Ok(Some(value))
}

/// A path value of a source column's type.
fn parse_source(text: &str, ty: &PrimitiveType) -> Result<Datum, String> {
    use PrimitiveType as P;
    let bad = || format!("{text:?} is not a {ty}");
    let iceberg = |e: iceberg::Error| format!("{text:?} is not a {ty}: {}", e.message());
    Ok(match ty {
        P::Boolean => Datum::bool(text.parse::<bool>().map_err(|_| bad())?),
        P::Int => Datum::int(text.parse::<i32>().map_err(|_| bad())?),
        P::Long => Datum::long(text.parse::<i64>().map_err(|_| bad())?),
        P::Float => Datum::float(text.parse::<f32>().map_err(|_| bad())?),
        P::Double => Datum::double(text.parse::<f64>().map_err(|_| bad())?),
        P::Decimal { .. } => {
            let d = Datum::decimal_from_str(text).map_err(iceberg)?;
            let bytes = d.to_bytes().map_err(iceberg)?;
            let (PrimitiveType::Decimal { scale: have, .. }, PrimitiveType::Decimal { scale: want, .. }) =
                (d.data_type(), ty)
            else {
                return Err(format!("{text:?} is not a {ty}"));
            };
            if have != want {
                return Err(format!(
                    "{text:?} does not have the {want} decimal places of {ty}"
                ));
            }
            Datum::try_from_bytes(&bytes, ty.clone()).map_err(iceberg)?
        }
        P::Date => Datum::date_from_str(text).map_err(iceberg)?,
        P::Time => Datum::time_from_str(text).map_err(iceberg)?,
        P::Timestamp => Datum::timestamp_from_str(text).map_err(iceberg)?,
        P::Timestamptz => Datum::timestamptz_from_str(text).map_err(iceberg)?,
        P::String => Datum::string(text),
        P::Uuid => Datum::uuid_from_str(text).map_err(iceberg)?,
        other => return Err(format!("values of type {other} cannot be read from a path")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_after_the_prefix() {
        let dirs = directories(
            "file:///lake/t/region=eu/day=2026-11-29/f.parquet",
            "file:///lake/t/",
        )
        .unwrap();
        assert_eq!(
            dirs,
            vec![
                ("region".to_string(), "eu".to_string()),
                ("day".to_string(), "2026-11-29".to_string())
            ]
        );
        let escaped = directories("/l/name=a%2Fb%3Dc/f.parquet", "/l").unwrap();
        assert_eq!(escaped, vec![("name".to_string(), "a/b=c".to_string())]);
        assert!(directories("/elsewhere/f.parquet", "/l").is_err());
        assert!(directories("/lake2/f.parquet", "/lake").is_err());
    }

    #[test]
    fn path_values_read_as_iceberg_prints_them() {
        use PrimitiveType as P;
        let ts = P::Timestamptz;
        let year = |t| parse_value(t, Transform::Year, &ts, &P::Int).unwrap().unwrap();
        assert_eq!(year("2026"), Datum::int(56));
        assert_eq!(year("56"), Datum::int(56));
        let month = parse_value("2026-11", Transform::Month, &ts, &P::Int)
            .unwrap()
            .unwrap();
        assert_eq!(month, Datum::int(56 * 12 + 10));
        let day = parse_value("2026-11-29", Transform::Day, &ts, &P::Date)
            .unwrap()
            .unwrap();
        assert_eq!(day, Datum::date_from_str("2026-11-29").unwrap());
        let hour = parse_value("1970-01-02-03", Transform::Hour, &ts, &P::Int)
            .unwrap()
            .unwrap();
        assert_eq!(hour, Datum::int(27));
        assert_eq!(
            parse_value("7", Transform::Bucket(16), &P::Long, &P::Int)
                .unwrap()
                .unwrap(),
            Datum::int(7)
        );
        assert_eq!(
            parse_value("null", Transform::Identity, &P::String, &P::String).unwrap(),
            None
        );
        let dec = P::Decimal {
            precision: 10,
            scale: 2,
        };
        assert!(parse_value("1.5", Transform::Identity, &dec, &dec).is_err());
        assert!(
            parse_value("1.50", Transform::Identity, &dec, &dec)
                .unwrap()
                .is_some()
        );
        assert!(parse_value("x", Transform::Identity, &P::Long, &P::Long).is_err());
        assert!(parse_value("2026-13", Transform::Month, &ts, &P::Int).is_err());
    }

    #[test]
    fn values_print_without_iceberg_rust_panics() {
        assert_eq!(
            human(&Datum::timestamptz_micros(-1)),
            "1969-12-31T23:59:59.999999+00:00"
        );
        assert_eq!(human(&Datum::timestamp_micros(0)), "1970-01-01T00:00:00.000000");
        assert_eq!(
            human(&Datum::timestamp_micros(i64::MAX)),
            format!("{} µs since 1970", i64::MAX)
        );
        assert_eq!(human(&Datum::date(-1)), "1969-12-31");
        assert_eq!(human(&Datum::date(i32::MAX)), format!("day {}", i32::MAX));
        assert_eq!(
            human(&Datum::time_micros(3_723_000_001).unwrap()),
            "01:02:03.000001"
        );
        assert_eq!(human(&Datum::long(7)), "7");
        // Out-of-range dates make no partition value, and no panic.
        let f = create_transform_function(&Transform::Year).unwrap();
        assert!(catch_unwind(AssertUnwindSafe(|| f.transform_literal(&Datum::date(i32::MAX)))).is_err());
    }

    #[test]
    fn human_strings_of_iceberg_rust_parse_back() {
        let f = create_transform_function(&Transform::Day).unwrap();
        let v = f
            .transform_literal(&Datum::timestamptz_micros(1_700_000_000_000_000))
            .unwrap()
            .unwrap();
        let text = Transform::Day.to_human_string(
            &Type::Primitive(PrimitiveType::Date),
            Some(&Literal::from(v.clone())),
        );
        let back = parse_value(
            &text,
            Transform::Day,
            &PrimitiveType::Timestamptz,
            &PrimitiveType::Date,
        )
        .unwrap()
        .unwrap();
        assert_eq!(back, v);
    }
}
