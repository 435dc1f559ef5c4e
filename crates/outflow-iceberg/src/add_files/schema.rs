//! A Parquet footer's schema in Outflow's model, with the statistics AddFiles needs.
//!
//! The schema is read from the Parquet schema itself rather than through Arrow, so that what
//! other writers put in footers keeps its meaning: UUID and JSON annotations, legacy two-level
//! lists, converted types of old writers, and field ids (present in files Iceberg writers
//! made, absent from pyarrow's). Each Parquet leaf column becomes a [`Leaf`]: its dotted path
//! in Outflow's model (`tags.element`, `attrs.value.score`), how its values are encoded, and
//! its statistics summed over the row groups.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use outflow_core::schema::{
    DataType, Field, LIST_ELEMENT, MAP_KEY, MAP_VALUE, MapFields, PrimitiveType, Schema, join_path,
};
use parquet::basic::{
    ColumnOrder, ConvertedType, LogicalType, Repetition, SortOrder, TimeUnit, Type as Physical,
};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::statistics::Statistics;
use parquet::schema::types::{SchemaDescriptor, Type as ParquetType, TypePtr};

use super::report::FileErrorKind;

/// The unit of a time or timestamp column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Unit {
    Millis,
    Micros,
    Nanos,
}

impl Unit {
    fn from_parquet(unit: &TimeUnit) -> Unit {
        match unit {
            TimeUnit::MILLIS => Unit::Millis,
            TimeUnit::MICROS => Unit::Micros,
            TimeUnit::NANOS => Unit::Nanos,
        }
    }
}

/// How a decimal is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum DecimalStorage {
    /// Little-endian INT32 or INT64.
    Integer,
    /// Big-endian two's complement bytes (FIXED_LEN_BYTE_ARRAY or BYTE_ARRAY).
    Bytes,
}

/// How a leaf's values, and so its min/max statistics, are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Encoding {
    Boolean,
    /// A signed integer (INT32 or INT64, plain or annotated), or an unsigned one of up to 16
    /// bits, whose values are the same read as signed.
    Signed,
    Float,
    Double,
    /// Days since the epoch.
    Date,
    Time(Unit),
    Timestamp(Unit),
    Decimal(DecimalStorage),
    Utf8,
    Binary,
    /// Fixed-length bytes (uuid, fixed).
    Fixed,
    /// Values whose statistics Outflow does not interpret.
    Opaque,
}

/// A min or max statistic, decoded from the file.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stat {
    Bool(bool),
    Int(i64),
    Float(f64),
    Decimal(i128),
    Bytes(Vec<u8>),
}

impl Stat {
    /// Orders two statistics of one column; `None` for mixed kinds.
    fn compare(&self, other: &Stat) -> Option<Ordering> {
        match (self, other) {
            (Stat::Bool(a), Stat::Bool(b)) => Some(a.cmp(b)),
            (Stat::Int(a), Stat::Int(b)) => Some(a.cmp(b)),
            (Stat::Float(a), Stat::Float(b)) => a.partial_cmp(b),
            (Stat::Decimal(a), Stat::Decimal(b)) => Some(a.cmp(b)),
            (Stat::Bytes(a), Stat::Bytes(b)) => Some(a.cmp(b)),
            _ => None,
        }
    }
}

/// One Parquet leaf column, with its statistics over all row groups.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Leaf {
    /// The dotted path in Outflow's model.
    pub path: String,
    /// The leaf's field id in the file, if it has one.
    pub file_id: Option<i32>,
    /// Whether a list or map lies above the leaf.
    pub under_container: bool,
    /// How its values are encoded.
    pub encoding: Encoding,
    /// Compressed bytes.
    pub column_size: u64,
    /// Values, nulls included.
    pub value_count: u64,
    /// Nulls; `None` when a row group lacks the count.
    pub null_count: Option<u64>,
    /// The smallest value, when every row group has one.
    pub lower: Option<Stat>,
    /// Whether `lower` is the exact minimum rather than a truncated prefix.
    pub lower_exact: bool,
    /// The largest value, when every row group has an exact one (a truncated maximum is not
    /// trusted as a bound).
    pub upper: Option<Stat>,
}

/// What the schema walk learns about a leaf before statistics are read.
#[derive(Debug)]
struct LeafShape {
    path: String,
    file_id: Option<i32>,
    under_container: bool,
    encoding: Encoding,
    /// The fields from the top level down to this leaf (itself included) that lie outside
    /// any list or map.
    ancestors: Vec<Ancestor>,
}

/// A field above a leaf (or the leaf itself), outside lists and maps.
#[derive(Clone, Debug)]
struct Ancestor {
    path: String,
    required: bool,
    /// Whether every node from below this field down to the leaf is required, so that the
    /// leaf is null exactly when this field (or one above it) is.
    exact_below: bool,
}

/// Why a file's schema cannot be used.
#[derive(Debug, PartialEq)]
pub(crate) struct SchemaError {
    pub kind: FileErrorKind,
    pub message: String,
}

fn unsupported(path: &str, what: impl std::fmt::Display) -> SchemaError {
    SchemaError {
        kind: FileErrorKind::UnsupportedSchema,
        message: format!("column {path}: {what} has no Iceberg type"),
    }
}

fn malformed(message: impl Into<String>) -> SchemaError {
    SchemaError {
        kind: FileErrorKind::Corrupt,
        message: message.into(),
    }
}

/// A file's schema with its null evidence, and its leaves.
#[derive(Debug)]
pub(crate) struct FileSchema {
    /// The file's schema in Outflow's model, shared by the run's files with the same
    /// Parquet schema.
    pub converted: Arc<ConvertedSchema>,
    /// The null counts the planner weighs, by column path. AddFiles moves them into the
    /// file's group once the footer is read (empty after).
    pub null_counts: BTreeMap<String, u64>,
    /// The leaves, in column order.
    pub leaves: Vec<Leaf>,
}

/// A Parquet schema converted to Outflow's model: what a footer says apart from its
/// statistics.
#[derive(Debug)]
pub(crate) struct ConvertedSchema {
    parquet: TypePtr,
    pub schema: Schema,
    /// Whether every field carries a field id (otherwise none does).
    pub uses_ids: bool,
    /// A hash of `schema`, so that grouping files does not hash it once a file.
    pub hash: u64,
    shapes: Vec<LeafShape>,
}

/// The Parquet schemas converted so far, shared by the footer reads of a run. The files of
/// a window mostly share one schema, and converting it again for each file cost as much as
/// the rest of reading the file's statistics.
#[derive(Debug, Default)]
pub(crate) struct SchemaCache {
    converted: Mutex<Vec<Arc<ConvertedSchema>>>,
}

/// Distinct schemas a [`SchemaCache`] keeps; files past them are converted each time, so
/// that a run of files that all differ does not compare each with every schema before it.
const CACHED_SCHEMAS: usize = 32;

impl SchemaCache {
    fn get_or_convert(&self, descr: &SchemaDescriptor) -> Result<Arc<ConvertedSchema>, SchemaError> {
        let root = descr.root_schema_ptr();
        let cached = |c: &Arc<ConvertedSchema>| Arc::ptr_eq(&c.parquet, &root) || *c.parquet == *root;
        if let Some(found) = self.lock().iter().find(|c| cached(c)) {
            return Ok(found.clone());
        }
        let converted = Arc::new(convert(descr)?);
        let mut seen = self.lock();
        if seen.len() < CACHED_SCHEMAS && !seen.iter().any(cached) {
            seen.push(converted.clone());
        }
        Ok(converted)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ConvertedSchema>>> {
        // The cache holds whole entries only, so one left by a panicking reader is usable.
        self.converted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Reads the schema (through `cache`) and statistics of a decoded footer.
pub(crate) fn file_schema(
    metadata: &ParquetMetaData,
    cache: &SchemaCache,
) -> Result<FileSchema, SchemaError> {
    let converted = cache.get_or_convert(metadata.file_metadata().schema_descr())?;
    let leaves = leaf_statistics(metadata, &converted.shapes)?;
    let null_counts = null_evidence(&converted.shapes, &leaves);
    Ok(FileSchema {
        converted,
        null_counts,
        leaves,
    })
}

/// Converts a footer's Parquet schema.
fn convert(descr: &SchemaDescriptor) -> Result<ConvertedSchema, SchemaError> {
    let root = descr.root_schema();
    if !root.is_group() {
        return Err(malformed("the footer's schema root is not a group"));
    }
    let mut shapes = Vec::new();
    let top = Context {
        under_container: false,
        ancestors: Vec::new(),
    };
    let fields = root
        .get_fields()
        .iter()
        .map(|c| field(c, "", None, &top, &mut shapes))
        .collect::<Result<Vec<_>, _>>()?;
    if fields.is_empty() {
        return Err(malformed("the footer's schema has no columns"));
    }
    if shapes.len() != descr.num_columns() {
        return Err(malformed(format!(
            "the footer's schema has {} leaves but describes {} columns",
            shapes.len(),
            descr.num_columns()
        )));
    }
    let schema = Schema::new(fields);
    schema
        .validate()
        .map_err(|e| malformed(format!("the footer's schema is invalid: {}", e.message())))?;
    let uses_ids = ids_of(&schema)?;
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        schema.hash(&mut h);
        h.finish()
    };
    Ok(ConvertedSchema {
        parquet: descr.root_schema_ptr(),
        schema,
        uses_ids,
        hash,
        shapes,
    })
}

/// Whether every field has an id. A file where only some do is rejected: readers disagree
/// about it (Java Iceberg resolves the ids there are and reads the other columns as null,
/// PyIceberg ignores them all and uses the name mapping).
fn ids_of(schema: &Schema) -> Result<bool, SchemaError> {
    let (mut with, mut without) = (Vec::new(), Vec::new());
    schema.visit(|path, f, _| {
        if f.id.is_some() {
            with.push(path.to_string());
        } else {
            without.push(path.to_string());
        }
    });
    match (with.is_empty(), without.is_empty()) {
        (true, _) => Ok(false),
        (false, true) => Ok(true),
        (false, false) => Err(SchemaError {
            kind: FileErrorKind::FieldIds,
            message: format!(
                "some columns carry Iceberg field ids ({}) and others do not ({}); readers resolve such files differently",
                sample(&with),
                sample(&without)
            ),
        }),
    }
}

/// The first few of `paths`, for messages.
pub(crate) fn sample(paths: &[String]) -> String {
    let mut out: Vec<&str> = paths.iter().take(3).map(String::as_str).collect();
    if paths.len() > 3 {
        out.push("...");
    }
    out.join(", ")
}

/// Where the walk is: below a list or map or not, and the fields above outside containers.
#[derive(Clone)]
struct Context {
    under_container: bool,
    ancestors: Vec<Ancestor>,
}

impl Context {
    /// The context inside a list or map: null counts below no longer equal the fields'
    /// above (they also count empty and null containers), but a zero still proves them
    /// never null.
    fn in_container(&self) -> Context {
        let mut ancestors = self.ancestors.clone();
        for a in &mut ancestors {
            a.exact_below = false;
        }
        Context {
            under_container: true,
            ancestors,
        }
    }
}

fn id_of(t: &ParquetType) -> Option<i32> {
    let info = t.get_basic_info();
    info.has_id().then(|| info.id())
}

fn repetition(t: &ParquetType) -> Repetition {
    let info = t.get_basic_info();
    if info.has_repetition() {
        info.repetition()
    } else {
        Repetition::REQUIRED
    }
}

fn is_list(t: &ParquetType) -> bool {
    let info = t.get_basic_info();
    t.is_group()
        && (matches!(info.logical_type_ref(), Some(LogicalType::List))
            || info.converted_type() == ConvertedType::LIST)
}

fn is_map(t: &ParquetType) -> bool {
    let info = t.get_basic_info();
    t.is_group()
        && (matches!(info.logical_type_ref(), Some(LogicalType::Map))
            || matches!(
                info.converted_type(),
                ConvertedType::MAP | ConvertedType::MAP_KEY_VALUE
            ))
}

/// The field for node `t` under `parent`, named `rename` (a list's `element`, a map's `key`
/// or `value`) or its own name. Its leaves are appended to `shapes` in column order.
fn field(
    t: &ParquetType,
    parent: &str,
    rename: Option<&str>,
    cx: &Context,
    shapes: &mut Vec<LeafShape>,
) -> Result<Field, SchemaError> {
    let name = rename.unwrap_or(t.name()).to_string();
    let path = join_path(parent, &name);
    let rep = repetition(t);
    if rep == Repetition::REPEATED {
        if rename.is_some() {
            return Err(malformed(format!("{path} is repeated inside a list or map")));
        }
        // An unannotated repeated field is a required list of required elements.
        let element_path = join_path(&path, LIST_ELEMENT);
        let element = Field {
            id: None,
            name: LIST_ELEMENT.to_string(),
            required: true,
            data_type: data_type(t, &element_path, &cx.in_container(), shapes)?,
            doc: None,
        };
        return Ok(Field {
            id: id_of(t),
            name,
            required: true,
            data_type: DataType::List {
                list: Box::new(element),
            },
            doc: None,
        });
    }
    let required = rep == Repetition::REQUIRED;
    let mut inner = cx.clone();
    if !cx.under_container {
        for a in inner.ancestors.iter_mut() {
            a.exact_below &= required;
        }
        inner.ancestors.push(Ancestor {
            path: path.clone(),
            required,
            exact_below: true,
        });
    }
    Ok(Field {
        id: id_of(t),
        name,
        required,
        data_type: data_type(t, &path, &inner, shapes)?,
        doc: None,
    })
}

/// The type of node `t` at `path` (its repetition is the caller's business).
fn data_type(
    t: &ParquetType,
    path: &str,
    cx: &Context,
    shapes: &mut Vec<LeafShape>,
) -> Result<DataType, SchemaError> {
    if t.is_primitive() {
        let (ty, encoding) = primitive(t, path)?;
        shapes.push(LeafShape {
            path: path.to_string(),
            file_id: id_of(t),
            under_container: cx.under_container,
            encoding,
            ancestors: cx.ancestors.clone(),
        });
        return Ok(DataType::Primitive(ty));
    }
    if is_list(t) {
        return list(t, path, cx, shapes);
    }
    if is_map(t) {
        return map(t, path, cx, shapes);
    }
    let fields = t
        .get_fields()
        .iter()
        .map(|c| field(c, path, None, cx, shapes))
        .collect::<Result<Vec<_>, _>>()?;
    if fields.is_empty() {
        return Err(unsupported(path, "an empty group"));
    }
    Ok(DataType::Struct { fields })
}

/// A LIST-annotated group, read with the Parquet format's backward-compatibility rules.
fn list(
    t: &ParquetType,
    path: &str,
    cx: &Context,
    shapes: &mut Vec<LeafShape>,
) -> Result<DataType, SchemaError> {
    let [repeated] = t.get_fields() else {
        return Err(malformed(format!("list {path} must have exactly one child")));
    };
    if repetition(repeated) != Repetition::REPEATED {
        return Err(malformed(format!("the child of list {path} is not repeated")));
    }
    let cx = cx.in_container();
    let name = repeated.name();
    let two_level = repeated.is_primitive()
        || repeated.get_fields().len() != 1
        || name == "array"
        || name == format!("{}_tuple", t.name());
    let element = if two_level {
        // The repeated node is the element itself.
        let element_path = join_path(path, LIST_ELEMENT);
        Field {
            id: id_of(repeated),
            name: LIST_ELEMENT.to_string(),
            required: true,
            data_type: data_type(repeated, &element_path, &cx, shapes)?,
            doc: None,
        }
    } else {
        field(&repeated.get_fields()[0], path, Some(LIST_ELEMENT), &cx, shapes)?
    };
    Ok(DataType::List {
        list: Box::new(element),
    })
}

/// A MAP-annotated group: a repeated group of a key and a value.
fn map(
    t: &ParquetType,
    path: &str,
    cx: &Context,
    shapes: &mut Vec<LeafShape>,
) -> Result<DataType, SchemaError> {
    let [key_value] = t.get_fields() else {
        return Err(malformed(format!("map {path} must have exactly one child")));
    };
    if repetition(key_value) != Repetition::REPEATED || !key_value.is_group() {
        return Err(malformed(format!(
            "the child of map {path} is not a repeated group"
        )));
    }
    let [key, value] = key_value.get_fields() else {
        return Err(unsupported(path, "a map without exactly one key and one value"));
    };
    let cx = cx.in_container();
    let mut key = field(key, path, Some(MAP_KEY), &cx, shapes)?;
    // Iceberg map keys are required; a file may declare them optional but cannot hold a
    // null key (the format forbids it).
    key.required = true;
    let value = field(value, path, Some(MAP_VALUE), &cx, shapes)?;
    Ok(DataType::Map {
        map: Box::new(MapFields { key, value }),
    })
}

fn decimal(
    path: &str,
    precision: i32,
    scale: i32,
    storage: DecimalStorage,
) -> Result<(PrimitiveType, Encoding), SchemaError> {
    if !(1..=38).contains(&precision) || !(0..=precision).contains(&scale) {
        return Err(unsupported(path, format!("decimal({precision},{scale})")));
    }
    Ok((
        PrimitiveType::Decimal {
            precision: precision as u8,
            scale: scale as i8,
        },
        Encoding::Decimal(storage),
    ))
}

/// The type and encoding of a primitive node.
fn primitive(t: &ParquetType, path: &str) -> Result<(PrimitiveType, Encoding), SchemaError> {
    use PrimitiveType as P;
    let ParquetType::PrimitiveType {
        physical_type,
        type_length,
        scale,
        precision,
        basic_info,
    } = t
    else {
        return Err(malformed(format!("{path} is not a primitive")));
    };
    let logical = basic_info.logical_type_ref();
    let converted = basic_info.converted_type();
    // Milli- and nanosecond timestamps become Iceberg's microsecond types: v1/v2 tables have
    // no others, and PyIceberg and Java Iceberg both read such columns as microseconds.
    let timestamp = |adjusted: bool, unit: Unit| {
        let ty = if adjusted { P::TimestampTz } else { P::Timestamp };
        Ok((ty, Encoding::Timestamp(unit)))
    };
    match (physical_type, logical, converted) {
        (_, Some(LogicalType::Unknown), _) => Err(unsupported(path, "a column of the null type")),
        (Physical::BOOLEAN, None, ConvertedType::NONE) => Ok((P::Boolean, Encoding::Boolean)),
        (Physical::INT32 | Physical::INT64, Some(LogicalType::Decimal { scale, precision }), _) => {
            decimal(path, *precision, *scale, DecimalStorage::Integer)
        }
        (Physical::INT32 | Physical::INT64, None, ConvertedType::DECIMAL) => {
            decimal(path, *precision, *scale, DecimalStorage::Integer)
        }
        (Physical::INT32, Some(LogicalType::Date), _) | (Physical::INT32, None, ConvertedType::DATE) => {
            Ok((P::Date, Encoding::Date))
        }
        // Iceberg's time is in microseconds; PyIceberg cannot read a millisecond time column.
        (
            Physical::INT32,
            Some(LogicalType::Time {
                unit: TimeUnit::MILLIS,
                ..
            }),
            _,
        )
        | (Physical::INT32, None, ConvertedType::TIME_MILLIS) => {
            Err(unsupported(path, "a time of day in milliseconds"))
        }
        (
            Physical::INT64,
            Some(LogicalType::Time {
                unit: TimeUnit::MICROS,
                ..
            }),
            _,
        ) => Ok((P::Time, Encoding::Time(Unit::Micros))),
        // Neither PyIceberg nor Java Iceberg reads nanosecond times.
        (
            Physical::INT64,
            Some(LogicalType::Time {
                unit: TimeUnit::NANOS,
                ..
            }),
            _,
        ) => Err(unsupported(path, "a time of day in nanoseconds")),
        (Physical::INT64, None, ConvertedType::TIME_MICROS) => Ok((P::Time, Encoding::Time(Unit::Micros))),
        (
            Physical::INT64,
            Some(LogicalType::Timestamp {
                is_adjusted_to_u_t_c,
                unit,
            }),
            _,
        ) => timestamp(*is_adjusted_to_u_t_c, Unit::from_parquet(unit)),
        // The converted timestamp types are instants (adjusted to UTC) by definition.
        (Physical::INT64, None, ConvertedType::TIMESTAMP_MILLIS) => timestamp(true, Unit::Millis),
        (Physical::INT64, None, ConvertedType::TIMESTAMP_MICROS) => timestamp(true, Unit::Micros),
        (
            Physical::INT32,
            Some(LogicalType::Integer {
                bit_width: 8 | 16 | 32,
                is_signed: true,
            })
            | Some(LogicalType::Integer {
                bit_width: 8 | 16,
                is_signed: false,
            }),
            _,
        )
        | (
            Physical::INT32,
            None,
            ConvertedType::NONE
            | ConvertedType::INT_8
            | ConvertedType::INT_16
            | ConvertedType::INT_32
            | ConvertedType::UINT_8
            | ConvertedType::UINT_16,
        ) => Ok((P::Int, Encoding::Signed)),
        // Java Iceberg reads an unsigned INT32 as a signed int: values from 2^31 up come back
        // negative.
        (
            Physical::INT32,
            Some(LogicalType::Integer {
                bit_width: 32,
                is_signed: false,
            }),
            _,
        )
        | (Physical::INT32, None, ConvertedType::UINT_32) => {
            Err(unsupported(path, "an unsigned 32-bit integer"))
        }
        (
            Physical::INT64,
            Some(LogicalType::Integer {
                bit_width: 64,
                is_signed: true,
            }),
            _,
        )
        | (Physical::INT64, None, ConvertedType::NONE | ConvertedType::INT_64) => {
            Ok((P::Long, Encoding::Signed))
        }
        (Physical::INT96, _, _) => Err(unsupported(
            path,
            "an INT96 timestamp (a legacy Spark/Impala encoding)",
        )),
        (Physical::FLOAT, None, ConvertedType::NONE) => Ok((P::Float, Encoding::Float)),
        (Physical::DOUBLE, None, ConvertedType::NONE) => Ok((P::Double, Encoding::Double)),
        (
            Physical::BYTE_ARRAY | Physical::FIXED_LEN_BYTE_ARRAY,
            Some(LogicalType::Decimal { scale, precision }),
            _,
        ) => decimal(path, *precision, *scale, DecimalStorage::Bytes),
        (Physical::BYTE_ARRAY | Physical::FIXED_LEN_BYTE_ARRAY, None, ConvertedType::DECIMAL) => {
            decimal(path, *precision, *scale, DecimalStorage::Bytes)
        }
        // JSON and enums are text; Iceberg (before v3) keeps them as strings.
        (Physical::BYTE_ARRAY, Some(LogicalType::String | LogicalType::Enum | LogicalType::Json), _)
        | (Physical::BYTE_ARRAY, None, ConvertedType::UTF8 | ConvertedType::ENUM | ConvertedType::JSON) => {
            Ok((P::String, Encoding::Utf8))
        }
        (Physical::BYTE_ARRAY, Some(LogicalType::Bson), _)
        | (Physical::BYTE_ARRAY, None, ConvertedType::NONE | ConvertedType::BSON) => {
            Ok((P::Binary, Encoding::Binary))
        }
        (Physical::FIXED_LEN_BYTE_ARRAY, Some(LogicalType::Uuid), _) if *type_length == 16 => {
            Ok((P::Uuid, Encoding::Fixed))
        }
        (Physical::FIXED_LEN_BYTE_ARRAY, None, ConvertedType::NONE) if *type_length >= 0 => {
            Ok((P::Fixed(*type_length as u32), Encoding::Fixed))
        }
        (physical, Some(logical), _) => Err(unsupported(path, format!("{physical} annotated {logical:?}"))),
        (physical, None, converted) => Err(unsupported(path, format!("{physical} annotated {converted}"))),
    }
}

/// The leaf's statistics over every row group.
fn leaf_statistics(metadata: &ParquetMetaData, shapes: &[LeafShape]) -> Result<Vec<Leaf>, SchemaError> {
    let orders = metadata.file_metadata().column_orders();
    let row_groups = metadata.row_groups();
    let mut leaves = Vec::with_capacity(shapes.len());
    for (i, shape) in shapes.iter().enumerate() {
        // Only statistics written under the type's own order are bounds Iceberg can use
        // (older writers compared strings as signed bytes, for one).
        let ordered = match orders.and_then(|o| o.get(i)) {
            Some(ColumnOrder::TYPE_DEFINED_ORDER(order)) => *order != SortOrder::UNDEFINED,
            _ => false,
        };
        let mut leaf = Leaf {
            path: shape.path.clone(),
            file_id: shape.file_id,
            under_container: shape.under_container,
            encoding: shape.encoding,
            column_size: 0,
            value_count: 0,
            null_count: Some(0),
            lower: None,
            lower_exact: true,
            upper: None,
        };
        let mut lower_known = ordered && shape.encoding != Encoding::Opaque;
        let mut upper_known = lower_known;
        for (g, group) in row_groups.iter().enumerate() {
            let column = group.columns().get(i).ok_or_else(|| {
                malformed(format!(
                    "row group {g} describes {} columns, the schema {}",
                    group.columns().len(),
                    i + 1
                ))
            })?;
            leaf.column_size = leaf
                .column_size
                .saturating_add(column.compressed_size().max(0) as u64);
            leaf.value_count = leaf.value_count.saturating_add(column.num_values().max(0) as u64);
            let stats = column.statistics();
            leaf.null_count = match (leaf.null_count, stats.and_then(Statistics::null_count_opt)) {
                (Some(sum), Some(n)) => Some(sum.saturating_add(n)),
                _ => None,
            };
            // A row group without a value (all nulls) has no min or max and does not
            // widen the file's bounds.
            let all_null = stats
                .and_then(Statistics::null_count_opt)
                .is_some_and(|n| n >= column.num_values().max(0) as u64);
            if all_null {
                continue;
            }
            let (min, max) = match stats {
                Some(s) => (decode(s, true, shape.encoding), decode(s, false, shape.encoding)),
                None => (None, None),
            };
            match min {
                Some(v) if lower_known => {
                    leaf.lower_exact &= stats.is_some_and(Statistics::min_is_exact);
                    merge(&mut leaf.lower, v, Ordering::Less, &mut lower_known);
                }
                _ => lower_known = false,
            }
            match max {
                Some(v) if upper_known && stats.is_some_and(Statistics::max_is_exact) => {
                    merge(&mut leaf.upper, v, Ordering::Greater, &mut upper_known);
                }
                _ => upper_known = false,
            }
        }
        if !lower_known {
            leaf.lower = None;
            leaf.lower_exact = false;
        }
        if !upper_known {
            leaf.upper = None;
        }
        leaves.push(leaf);
    }
    Ok(leaves)
}

/// Keeps in `bound` whichever of it and `value` lies further in direction `keep`.
fn merge(bound: &mut Option<Stat>, value: Stat, keep: Ordering, known: &mut bool) {
    match bound {
        None => *bound = Some(value),
        Some(current) => match value.compare(current) {
            Some(o) if o == keep => *bound = Some(value),
            Some(_) => {}
            None => *known = false,
        },
    }
}

/// A row group's min (`min` true) or max, decoded for `encoding`; `None` when absent or
/// not usable (NaN, unexpected width).
fn decode(stats: &Statistics, min: bool, encoding: Encoding) -> Option<Stat> {
    use Encoding as E;
    let pick = |lo: Option<Stat>, hi: Option<Stat>| if min { lo } else { hi };
    match stats {
        Statistics::Boolean(s) if encoding == E::Boolean => pick(
            s.min_opt().map(|v| Stat::Bool(*v)),
            s.max_opt().map(|v| Stat::Bool(*v)),
        ),
        Statistics::Int32(s) => {
            let v = *(if min { s.min_opt() } else { s.max_opt() })?;
            match encoding {
                E::Signed | E::Date | E::Time(_) => Some(Stat::Int(v as i64)),
                E::Decimal(DecimalStorage::Integer) => Some(Stat::Decimal(v as i128)),
                _ => None,
            }
        }
        Statistics::Int64(s) => {
            let v = *(if min { s.min_opt() } else { s.max_opt() })?;
            match encoding {
                E::Signed | E::Time(_) | E::Timestamp(_) => Some(Stat::Int(v)),
                E::Decimal(DecimalStorage::Integer) => Some(Stat::Decimal(v as i128)),
                _ => None,
            }
        }
        Statistics::Float(s) if encoding == E::Float => {
            let v = *(if min { s.min_opt() } else { s.max_opt() })?;
            (!v.is_nan()).then_some(Stat::Float(v as f64))
        }
        Statistics::Double(s) if encoding == E::Double => {
            let v = *(if min { s.min_opt() } else { s.max_opt() })?;
            (!v.is_nan()).then_some(Stat::Float(v))
        }
        Statistics::ByteArray(s) => {
            let v = (if min { s.min_opt() } else { s.max_opt() })?;
            bytes_stat(v.data(), encoding)
        }
        Statistics::FixedLenByteArray(s) => {
            let v = (if min { s.min_opt() } else { s.max_opt() })?;
            bytes_stat(v.data(), encoding)
        }
        _ => None,
    }
}

fn bytes_stat(data: &[u8], encoding: Encoding) -> Option<Stat> {
    match encoding {
        Encoding::Utf8 | Encoding::Binary | Encoding::Fixed => Some(Stat::Bytes(data.to_vec())),
        Encoding::Decimal(DecimalStorage::Bytes) => be_i128(data).map(Stat::Decimal),
        _ => None,
    }
}

/// A big-endian two's complement integer of up to 16 significant bytes.
fn be_i128(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() {
        return None;
    }
    let negative = bytes[0] & 0x80 != 0;
    let extension = if negative { 0xff } else { 0x00 };
    // Longer encodings are fine as long as the extra leading bytes only extend the sign.
    let (head, tail) = bytes.split_at(bytes.len().saturating_sub(16));
    if head.iter().any(|b| *b != extension) {
        return None;
    }
    let mut buf = [extension; 16];
    buf[16 - tail.len()..].copy_from_slice(tail);
    let value = i128::from_be_bytes(buf);
    // A 16-byte tail whose own sign bit contradicts the extension overflowed i128.
    ((value < 0) == negative).then_some(value)
}

/// What the leaves' null counts prove about each field outside lists and maps, in the
/// planner's terms: the nulls among rows where the field's parent is present.
fn null_evidence(shapes: &[LeafShape], leaves: &[Leaf]) -> BTreeMap<String, u64> {
    let mut zero: BTreeMap<&str, bool> = BTreeMap::new();
    let mut exact: BTreeMap<&str, u64> = BTreeMap::new();
    for (shape, leaf) in shapes.iter().zip(leaves) {
        for (k, a) in shape.ancestors.iter().enumerate() {
            let proven_zero = leaf.null_count == Some(0);
            *zero.entry(&a.path).or_default() |= proven_zero;
            // The leaf counts this field's nulls exactly when nothing between them can be
            // null and nothing above can hide rows.
            let above_required = shape.ancestors[..k].iter().all(|p| p.required);
            if a.exact_below
                && above_required
                && let Some(n) = leaf.null_count
            {
                exact.insert(&a.path, n);
            }
        }
    }
    let mut out = BTreeMap::new();
    for (path, proven_zero) in zero {
        if proven_zero {
            out.insert(path.to_string(), 0);
        } else if let Some(n) = exact.get(path) {
            out.insert(path.to_string(), *n);
        }
    }
    out
}
