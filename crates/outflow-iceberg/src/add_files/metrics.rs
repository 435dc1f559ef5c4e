//! Data files from footers: the metrics Iceberg keeps per file, keyed by table field ids.
//!
//! Each Parquet leaf is resolved to a table field the way Iceberg readers will resolve it:
//! by the file's own field ids when it has them, else by name through the table's name
//! mapping. Bounds are converted from the file's encoding to Iceberg's single-value
//! encoding of the table field's type (ints widened to longs, floats to doubles, decimals
//! re-encoded, millisecond and nanosecond times brought to microseconds, rounding outwards
//! so a bound stays a bound), for leaves outside lists and maps. String and binary bounds are truncated to 16 characters or
//! bytes as Iceberg's default metrics mode does: a lower bound to its prefix, an upper bound
//! to its prefix with the last character incremented (or no upper bound when none can be).

use std::collections::HashMap;

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, Datum, PrimitiveType,
    Schema as IcebergSchema, Struct, Type,
};
use outflow_core::schema::{MappedField, NameMapping, split_path};

use parquet::file::metadata::ParquetMetaData;

use super::footer::FileFacts;
use super::schema::{Encoding, Leaf, SchemaCache, Stat, Unit};

/// Characters (strings) or bytes (binary) a bound keeps, as Iceberg's `truncate(16)`.
const TRUNCATE: usize = 16;

/// A leaf's table field.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Resolved {
    pub id: i32,
    pub ty: PrimitiveType,
}

/// The table field of each leaf of a file, in leaf order (`None`: the leaf is not a table
/// column), or why the file cannot be registered.
pub(crate) fn resolve_leaves(
    leaves: &[Leaf],
    uses_ids: bool,
    schema: &IcebergSchema,
    mapping: Option<&NameMapping>,
) -> Result<Vec<Option<Resolved>>, String> {
    leaves
        .iter()
        .map(|leaf| {
            let id = if uses_ids {
                leaf.file_id
            } else {
                let mapping = mapping.ok_or_else(|| {
                    "the file has no field ids and the table has no name mapping".to_string()
                })?;
                Some(
                    mapped_id(&mapping.fields, &leaf.path)
                        .ok_or_else(|| format!("column {} is not in the table's name mapping", leaf.path))?,
                )
            };
            let Some(id) = id else { return Ok(None) };
            match schema.field_by_id(id).map(|f| f.field_type.as_ref()) {
                Some(Type::Primitive(ty)) => Ok(Some(Resolved { id, ty: ty.clone() })),
                Some(other) => Err(format!(
                    "column {} resolves to table field {id}, a {other} rather than a primitive",
                    leaf.path
                )),
                None => Err(format!(
                    "column {} carries field id {id}, which the table does not have",
                    leaf.path
                )),
            }
        })
        .collect()
}

/// The field id a dotted leaf path maps to, following Iceberg readers: each segment is
/// looked up among the names mapped at its level (`element`, `key`, `value` for the parts
/// of lists and maps).
fn mapped_id(top: &[MappedField], path: &str) -> Option<i32> {
    let mut level = top;
    let mut id = None;
    for name in split_path(path).ok()? {
        let found = NameMapping::lookup(level, &name)?;
        level = NameMapping::children(level, found);
        id = Some(found);
    }
    id
}

/// A data file for `facts`, with `partition` values under spec `spec_id`.
pub(crate) fn data_file(
    facts: &FileFacts,
    resolved: &[Option<Resolved>],
    partition: Struct,
    spec_id: i32,
) -> Result<DataFile, String> {
    builder(facts, resolved)
        .partition(partition)
        .partition_spec_id(spec_id)
        .build()
        .map_err(|e| format!("building the data file: {e}"))
}

/// The data file of a Parquet file Outflow wrote in the table's `schema` (its field ids in
/// the file), from the footer its writer returned: the metrics AddFiles registers for a
/// file. Unpartitioned; the caller sets the partition and NaN counts.
pub(crate) fn written_data_file(
    location: String,
    size: u64,
    footer: &ParquetMetaData,
    schema: &IcebergSchema,
    schemas: &SchemaCache,
) -> Result<DataFileBuilder, String> {
    let facts = super::footer::facts(location, size, footer, schemas).map_err(|f| f.message)?;
    let resolved = resolve_leaves(&facts.schema.leaves, true, schema, None)?;
    let mut file = builder(&facts, &resolved);
    file.partition(Struct::empty());
    Ok(file)
}

/// The metrics of `facts` by table field id, in a builder without a partition.
fn builder(facts: &FileFacts, resolved: &[Option<Resolved>]) -> DataFileBuilder {
    let mut sizes: HashMap<i32, u64> = HashMap::new();
    let mut values: HashMap<i32, u64> = HashMap::new();
    let mut nulls: HashMap<i32, u64> = HashMap::new();
    let mut lower: HashMap<i32, Datum> = HashMap::new();
    let mut upper: HashMap<i32, Datum> = HashMap::new();
    for (leaf, resolved) in facts.schema.leaves.iter().zip(resolved) {
        let Some(Resolved { id, ty }) = resolved else {
            continue;
        };
        *sizes.entry(*id).or_default() += leaf.column_size;
        *values.entry(*id).or_default() += leaf.value_count;
        if let Some(n) = leaf.null_count {
            *nulls.entry(*id).or_default() += n;
        }
        // No bounds under lists and maps, as Java Iceberg and PyIceberg do: filters cannot
        // address those values.
        if leaf.under_container {
            continue;
        }
        if let Some(d) = leaf
            .lower
            .as_ref()
            .and_then(|s| to_datum(s, leaf.encoding, ty, false))
            .and_then(|(d, _)| truncate_lower(d))
        {
            lower.insert(*id, d);
        }
        if let Some(d) = leaf
            .upper
            .as_ref()
            .and_then(|s| to_datum(s, leaf.encoding, ty, true))
            .and_then(|(d, _)| truncate_upper(d))
        {
            upper.insert(*id, d);
        }
    }
    let mut builder = DataFileBuilder::default();
    builder
        .content(DataContentType::Data)
        .file_path(facts.location.clone())
        .file_format(DataFileFormat::Parquet)
        .record_count(facts.record_count)
        .file_size_in_bytes(facts.size)
        .column_sizes(sizes)
        .value_counts(values)
        .null_value_counts(nulls)
        .lower_bounds(lower)
        .upper_bounds(upper)
        .split_offsets(facts.split_offsets.clone());
    builder
}

/// `value` in `from` units as `to` units, rounding down (`up` false) or up when `to` is
/// coarser; `None` on overflow. The flag says whether the conversion is exact.
fn rescale(value: i64, from: Unit, to: Unit, up: bool) -> Option<(i64, bool)> {
    let rank = |u: Unit| match u {
        Unit::Millis => 0u32,
        Unit::Micros => 1,
        Unit::Nanos => 2,
    };
    let (f, t) = (rank(from), rank(to));
    if f <= t {
        let factor = 1000i64.pow(t - f);
        return value.checked_mul(factor).map(|v| (v, true));
    }
    let factor = 1000i64.pow(f - t);
    let floor = value.div_euclid(factor);
    let exact = value.rem_euclid(factor) == 0;
    let v = if up && !exact {
        floor.checked_add(1)?
    } else {
        floor
    };
    Some((v, exact))
}

/// A file statistic as a value of the table field's type `ty`; `upper` picks the rounding
/// direction when units narrow. The flag says whether the value is exactly the statistic
/// (partition inference needs exact values; metrics only need bounds).
pub(crate) fn to_datum(
    stat: &Stat,
    encoding: Encoding,
    ty: &PrimitiveType,
    upper: bool,
) -> Option<(Datum, bool)> {
    use PrimitiveType as P;
    let exact = |d: Datum| Some((d, true));
    match (ty, encoding, stat) {
        (P::Boolean, Encoding::Boolean, Stat::Bool(b)) => exact(Datum::bool(*b)),
        (P::Int, Encoding::Signed, Stat::Int(v)) => exact(Datum::int(i32::try_from(*v).ok()?)),
        (P::Long, Encoding::Signed, Stat::Int(v)) => exact(Datum::long(*v)),
        (P::Float, Encoding::Float, Stat::Float(v)) => exact(Datum::float(*v as f32)),
        (P::Double, Encoding::Float | Encoding::Double, Stat::Float(v)) => exact(Datum::double(*v)),
        (P::Date, Encoding::Date, Stat::Int(v)) => exact(Datum::date(i32::try_from(*v).ok()?)),
        (P::Time, Encoding::Time(unit), Stat::Int(v)) => {
            let (micros, is_exact) = rescale(*v, unit, Unit::Micros, upper)?;
            Some((Datum::time_micros(micros).ok()?, is_exact))
        }
        (
            P::Timestamp | P::Timestamptz | P::TimestampNs | P::TimestamptzNs,
            Encoding::Timestamp(unit),
            Stat::Int(v),
        ) => {
            let target = if matches!(ty, P::TimestampNs | P::TimestamptzNs) {
                Unit::Nanos
            } else {
                Unit::Micros
            };
            let (value, is_exact) = rescale(*v, unit, target, upper)?;
            let datum = match ty {
                P::Timestamp => Datum::timestamp_micros(value),
                P::Timestamptz => Datum::timestamptz_micros(value),
                P::TimestampNs => Datum::timestamp_nanos(value),
                _ => Datum::timestamptz_nanos(value),
            };
            Some((datum, is_exact))
        }
        (P::Decimal { .. }, Encoding::Decimal(_), Stat::Decimal(v)) => {
            exact(Datum::try_from_bytes(&v.to_be_bytes(), ty.clone()).ok()?)
        }
        (P::String, Encoding::Utf8, Stat::Bytes(b)) => exact(Datum::string(std::str::from_utf8(b).ok()?)),
        (P::Binary, Encoding::Binary, Stat::Bytes(b)) => exact(Datum::binary(b.iter().copied())),
        (P::Uuid, Encoding::Fixed, Stat::Bytes(b)) => exact(Datum::uuid(uuid::Uuid::from_slice(b).ok()?)),
        (P::Fixed(len), Encoding::Fixed, Stat::Bytes(b)) if b.len() as u64 == *len => {
            exact(Datum::fixed(b.iter().copied()))
        }
        _ => None,
    }
}

/// A lower bound cut to [`TRUNCATE`] characters or bytes (a prefix is still a lower bound).
fn truncate_lower(d: Datum) -> Option<Datum> {
    match d.literal() {
        iceberg::spec::PrimitiveLiteral::String(s) if d.data_type() == &PrimitiveType::String => {
            Some(Datum::string(s.chars().take(TRUNCATE).collect::<String>()))
        }
        iceberg::spec::PrimitiveLiteral::Binary(b) if d.data_type() == &PrimitiveType::Binary => {
            Some(Datum::binary(b.iter().take(TRUNCATE).copied()))
        }
        _ => Some(d),
    }
}

/// An upper bound cut to [`TRUNCATE`] characters or bytes and incremented so that it stays
/// above every value; `None` when no such bound exists (all maximal characters).
fn truncate_upper(d: Datum) -> Option<Datum> {
    match d.literal() {
        iceberg::spec::PrimitiveLiteral::String(s) if d.data_type() == &PrimitiveType::String => {
            truncate_str_upper(s).map(Datum::string)
        }
        iceberg::spec::PrimitiveLiteral::Binary(b) if d.data_type() == &PrimitiveType::Binary => {
            truncate_bytes_upper(b).map(Datum::binary)
        }
        _ => Some(d),
    }
}

pub(crate) fn truncate_str_upper(s: &str) -> Option<String> {
    if s.chars().count() <= TRUNCATE {
        return Some(s.to_string());
    }
    let mut chars: Vec<char> = s.chars().take(TRUNCATE).collect();
    while let Some(last) = chars.pop() {
        // The next code point, skipping the surrogate range (not characters).
        let mut next = last as u32 + 1;
        if (0xD800..=0xDFFF).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

pub(crate) fn truncate_bytes_upper(b: &[u8]) -> Option<Vec<u8>> {
    if b.len() <= TRUNCATE {
        return Some(b.to_vec());
    }
    let mut out: Vec<u8> = b[..TRUNCATE].to_vec();
    while let Some(last) = out.pop() {
        if last < u8::MAX {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_narrow_outwards_and_widen_exactly() {
        assert_eq!(
            rescale(1_500, Unit::Millis, Unit::Micros, false),
            Some((1_500_000, true))
        );
        assert_eq!(rescale(1_001, Unit::Nanos, Unit::Micros, false), Some((1, false)));
        assert_eq!(rescale(1_001, Unit::Nanos, Unit::Micros, true), Some((2, false)));
        assert_eq!(
            rescale(-1_001, Unit::Nanos, Unit::Micros, false),
            Some((-2, false))
        );
        assert_eq!(
            rescale(-1_001, Unit::Nanos, Unit::Micros, true),
            Some((-1, false))
        );
        assert_eq!(rescale(2_000, Unit::Nanos, Unit::Micros, true), Some((2, true)));
        assert_eq!(rescale(i64::MAX, Unit::Millis, Unit::Micros, false), None);
    }

    #[test]
    fn stats_convert_to_the_table_type() {
        let long = to_datum(&Stat::Int(7), Encoding::Signed, &PrimitiveType::Long, false).unwrap();
        assert_eq!(long.0, Datum::long(7));
        let double = to_datum(&Stat::Float(1.5), Encoding::Float, &PrimitiveType::Double, false).unwrap();
        assert_eq!(double.0, Datum::double(1.5));
        let ts = to_datum(
            &Stat::Int(1_700_000_000_123),
            Encoding::Timestamp(Unit::Millis),
            &PrimitiveType::Timestamptz,
            false,
        )
        .unwrap();
        assert_eq!(ts.0, Datum::timestamptz_micros(1_700_000_000_123_000));
        let ty = PrimitiveType::Decimal {
            precision: 20,
            scale: 2,
        };
        let dec = to_datum(
            &Stat::Decimal(-12345),
            Encoding::Decimal(super::super::schema::DecimalStorage::Integer),
            &ty,
            false,
        )
        .unwrap();
        assert_eq!(
            dec.0.to_bytes().unwrap(),
            Datum::try_from_bytes(&(-12345i128).to_be_bytes(), ty)
                .unwrap()
                .to_bytes()
                .unwrap()
        );
        // A string statistic is not a long, and bytes that are not UTF-8 are no string.
        assert!(
            to_datum(
                &Stat::Bytes(b"x".to_vec()),
                Encoding::Utf8,
                &PrimitiveType::Long,
                false
            )
            .is_none()
        );
        assert!(
            to_datum(
                &Stat::Bytes(vec![0xff]),
                Encoding::Utf8,
                &PrimitiveType::String,
                false
            )
            .is_none()
        );
        assert!(to_datum(&Stat::Int(i64::MAX), Encoding::Signed, &PrimitiveType::Int, false).is_none());
    }

    #[test]
    fn long_bounds_are_truncated_safely() {
        let s = "abcdefghijklmnopqrstuvwxyz";
        assert_eq!(truncate_str_upper(s).unwrap(), "abcdefghijklmnoq");
        assert_eq!(truncate_str_upper("short").unwrap(), "short");
        let maxed: String = std::iter::repeat_n(char::MAX, 20).collect();
        assert_eq!(truncate_str_upper(&maxed), None);
        let surrogate_edge: String = std::iter::repeat_n('\u{D7FF}', 20).collect();
        assert!(truncate_str_upper(&surrogate_edge).unwrap().ends_with('\u{E000}'));
        assert_eq!(truncate_bytes_upper(&[0xff; 20]), None);
        let mut bytes = vec![1u8; 15];
        bytes.extend([0xff, 0xff, 3]);
        assert_eq!(
            truncate_bytes_upper(&bytes).unwrap(),
            [vec![1u8; 14], vec![2]].concat()
        );
        let lower = truncate_lower(Datum::string(s)).unwrap();
        assert_eq!(lower, Datum::string("abcdefghijklmnop"));
    }
}
