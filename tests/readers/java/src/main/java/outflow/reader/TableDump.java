package outflow.reader;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.PartitionField;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;

/**
 * Builds the canonical JSON document of a table: metadata (current schema, default partition
 * spec, properties, snapshots) and all rows read with the table's current schema.
 */
final class TableDump {
  private TableDump() {}

  static String dump(String tableName, Table table) throws Exception {
    Schema schema = table.schema();
    Map<String, Object> doc = CanonicalJson.object();
    doc.put("table", tableName);
    doc.put("format_version", ((HasTableOperations) table).operations().current().formatVersion());
    doc.put("schema", schemaJson(schema));
    doc.put("partition_spec", specJson(table.spec()));
    Map<String, Object> properties = CanonicalJson.object();
    properties.putAll(table.properties());
    doc.put("properties", properties);

    List<Object> snapshots = new ArrayList<>();
    for (Snapshot s : table.snapshots()) {
      Map<String, Object> snap = CanonicalJson.object();
      snap.put("snapshot_id", s.snapshotId());
      snap.put("parent_id", s.parentId());
      snap.put("operation", s.operation());
      Map<String, Object> summary = CanonicalJson.object();
      if (s.summary() != null) {
        summary.putAll(s.summary());
      }
      snap.put("summary", summary);
      snapshots.add(snap);
    }
    doc.put("snapshots", snapshots);
    Snapshot current = table.currentSnapshot();
    doc.put("current_snapshot_id", current == null ? null : current.snapshotId());

    List<String> rows = new ArrayList<>();
    // IcebergGenerics scans the current snapshot with the table's current schema: files written
    // before an evolution come back with promoted types and nulls for added columns.
    try (CloseableIterable<Record> records = IcebergGenerics.read(table).project(schema).build()) {
      for (Record r : records) {
        rows.add(CanonicalJson.write(structValue(schema.asStruct(), r)));
      }
    }
    Collections.sort(rows, CanonicalJson.CODE_POINT_ORDER);
    doc.put("row_count", rows.size());
    doc.put("rows", null);

    // Splice the already-serialized rows in (they were needed as text for sorting anyway).
    String text = CanonicalJson.write(doc);
    String marker = "\"rows\":null";
    int at = text.indexOf(marker);
    if (at < 0) {
      throw new IllegalStateException("rows marker missing");
    }
    StringBuilder sb = new StringBuilder(text.length() + 64 * rows.size());
    sb.append(text, 0, at).append("\"rows\":[");
    for (int i = 0; i < rows.size(); i++) {
      if (i > 0) {
        sb.append(',');
      }
      sb.append(rows.get(i));
    }
    sb.append(']').append(text, at + marker.length(), text.length());
    return sb.toString();
  }

  // ---------------------------------------------------------------- schema and spec

  static Map<String, Object> schemaJson(Schema schema) {
    Map<String, Object> out = CanonicalJson.object();
    out.put("type", "struct");
    out.put("schema-id", schema.schemaId());
    out.put("fields", fieldsJson(schema.asStruct()));
    return out;
  }

  private static List<Object> fieldsJson(Types.StructType struct) {
    List<Object> fields = new ArrayList<>();
    for (Types.NestedField f : struct.fields()) {
      Map<String, Object> field = CanonicalJson.object();
      field.put("id", f.fieldId());
      field.put("name", f.name());
      field.put("required", f.isRequired());
      field.put("type", typeJson(f.type()));
      fields.add(field);
    }
    return fields;
  }

  static Object typeJson(Type type) {
    switch (type.typeId()) {
      case STRUCT:
        {
          Map<String, Object> out = CanonicalJson.object();
          out.put("type", "struct");
          out.put("fields", fieldsJson(type.asStructType()));
          return out;
        }
      case LIST:
        {
          Types.ListType list = type.asListType();
          Map<String, Object> out = CanonicalJson.object();
          out.put("type", "list");
          out.put("element-id", list.elementId());
          out.put("element", typeJson(list.elementType()));
          out.put("element-required", list.isElementRequired());
          return out;
        }
      case MAP:
        {
          Types.MapType map = type.asMapType();
          Map<String, Object> out = CanonicalJson.object();
          out.put("type", "map");
          out.put("key-id", map.keyId());
          out.put("key", typeJson(map.keyType()));
          out.put("value-id", map.valueId());
          out.put("value", typeJson(map.valueType()));
          out.put("value-required", map.isValueRequired());
          return out;
        }
      case BOOLEAN:
        return "boolean";
      case INTEGER:
        return "int";
      case LONG:
        return "long";
      case FLOAT:
        return "float";
      case DOUBLE:
        return "double";
      case DECIMAL:
        {
          Types.DecimalType dec = (Types.DecimalType) type;
          return "decimal(" + dec.precision() + "," + dec.scale() + ")";
        }
      case DATE:
        return "date";
      case TIME:
        return "time";
      case TIMESTAMP:
        return ((Types.TimestampType) type).shouldAdjustToUTC() ? "timestamptz" : "timestamp";
      case TIMESTAMP_NANO:
        return ((Types.TimestampNanoType) type).shouldAdjustToUTC()
            ? "timestamptz_ns"
            : "timestamp_ns";
      case STRING:
        return "string";
      case UUID:
        return "uuid";
      case FIXED:
        return "fixed[" + ((Types.FixedType) type).length() + "]";
      case BINARY:
        return "binary";
      default:
        return type.toString();
    }
  }

  static List<Object> specJson(PartitionSpec spec) {
    List<Object> out = new ArrayList<>();
    for (PartitionField pf : spec.fields()) {
      Map<String, Object> field = CanonicalJson.object();
      field.put("source_id", pf.sourceId());
      field.put("field_id", pf.fieldId());
      field.put("name", pf.name());
      field.put("transform", pf.transform().toString());
      out.add(field);
    }
    return out;
  }

  // ---------------------------------------------------------------- values

  private static Map<String, Object> structValue(Types.StructType type, StructLike struct) {
    Map<String, Object> out = CanonicalJson.object();
    List<Types.NestedField> fields = type.fields();
    for (int i = 0; i < fields.size(); i++) {
      Types.NestedField f = fields.get(i);
      Object v;
      if (struct instanceof Record) {
        v = ((Record) struct).get(i);
      } else {
        v = struct.get(i, Object.class);
      }
      out.put(f.name(), value(f.type(), v));
    }
    return out;
  }

  static Object value(Type type, Object v) {
    if (v == null) {
      return null;
    }
    switch (type.typeId()) {
      case BOOLEAN:
        return (Boolean) v;
      case INTEGER:
        return ((Number) v).longValue();
      case LONG:
        return ((Number) v).longValue();
      case FLOAT:
      case DOUBLE:
        {
          double d = ((Number) v).doubleValue(); // float widens exactly
          if (Double.isNaN(d)) {
            return "NaN";
          }
          if (Double.isInfinite(d)) {
            return d > 0 ? "Infinity" : "-Infinity";
          }
          return new CanonicalJson.PyFloat(d);
        }
      case DECIMAL:
        return ((BigDecimal) v)
            .setScale(((Types.DecimalType) type).scale())
            .toPlainString();
      case DATE:
        return date((LocalDate) v);
      case TIME:
        return time((LocalTime) v);
      case TIMESTAMP:
      case TIMESTAMP_NANO:
        {
          boolean nanos = type.typeId() == Type.TypeID.TIMESTAMP_NANO;
          if (v instanceof OffsetDateTime) {
            LocalDateTime utc =
                ((OffsetDateTime) v).withOffsetSameInstant(ZoneOffset.UTC).toLocalDateTime();
            return dateTime(utc, nanos) + "+00:00";
          }
          return dateTime((LocalDateTime) v, nanos);
        }
      case STRING:
        return v.toString();
      case UUID:
        if (v instanceof byte[]) {
          // Files whose writer left out Parquet's UUID annotation (iceberg-rust 0.10 does)
          // come back as the 16 raw bytes; the value is the same.
          java.nio.ByteBuffer b = java.nio.ByteBuffer.wrap((byte[]) v);
          return new UUID(b.getLong(), b.getLong()).toString();
        }
        return ((UUID) v).toString();
      case FIXED:
      case BINARY:
        return hex(v);
      case STRUCT:
        return structValue(type.asStructType(), (StructLike) v);
      case LIST:
        {
          Types.ListType list = type.asListType();
          List<Object> out = new ArrayList<>();
          for (Object item : (List<?>) v) {
            out.add(value(list.elementType(), item));
          }
          return out;
        }
      case MAP:
        {
          Types.MapType map = type.asMapType();
          List<Object> entries = new ArrayList<>();
          List<Map.Entry<String, Object>> sortable = new ArrayList<>();
          for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
            Object key = value(map.keyType(), e.getKey());
            Map<String, Object> entry = CanonicalJson.object();
            entry.put("key", key);
            entry.put("value", value(map.valueType(), e.getValue()));
            sortable.add(Map.entry(CanonicalJson.write(key), entry));
          }
          sortable.sort((a, b) -> CanonicalJson.CODE_POINT_ORDER.compare(a.getKey(), b.getKey()));
          for (Map.Entry<String, Object> e : sortable) {
            entries.add(e.getValue());
          }
          return entries;
        }
      default:
        throw new UnsupportedOperationException("unsupported Iceberg type in rows: " + type);
    }
  }

  private static String date(LocalDate d) {
    return String.format("%04d-%02d-%02d", d.getYear(), d.getMonthValue(), d.getDayOfMonth());
  }

  private static String time(LocalTime t) {
    return String.format(
        "%02d:%02d:%02d.%06d", t.getHour(), t.getMinute(), t.getSecond(), t.getNano() / 1000);
  }

  private static String dateTime(LocalDateTime ts, boolean nanos) {
    LocalTime t = ts.toLocalTime();
    String frac =
        nanos ? String.format("%09d", t.getNano()) : String.format("%06d", t.getNano() / 1000);
    return date(ts.toLocalDate())
        + String.format("T%02d:%02d:%02d.", t.getHour(), t.getMinute(), t.getSecond())
        + frac;
  }

  private static final char[] HEX = "0123456789abcdef".toCharArray();

  private static String hex(Object v) {
    byte[] bytes;
    if (v instanceof byte[]) {
      bytes = (byte[]) v;
    } else if (v instanceof ByteBuffer) {
      ByteBuffer buf = ((ByteBuffer) v).duplicate();
      bytes = new byte[buf.remaining()];
      buf.get(bytes);
    } else {
      throw new IllegalArgumentException("binary value of class " + v.getClass().getName());
    }
    StringBuilder sb = new StringBuilder(bytes.length * 2);
    for (byte b : bytes) {
      sb.append(HEX[(b >> 4) & 0xF]).append(HEX[b & 0xF]);
    }
    return sb.toString();
  }
}
