package outflow.reader;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Schema;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.GenericFileWriterFactory;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
import org.apache.iceberg.deletes.EqualityDeleteWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.encryption.EncryptedFiles;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;

/**
 * What the tests ask Java Iceberg about a table's files, and the delete files they have it
 * write (Outflow writes none of its own yet).
 *
 * <ul>
 *   <li>{@code files}: the current snapshot's data files as Java's scan planning sees them:
 *       path, partition (as its path), rows, size, and per column the value and null counts
 *       and the lower and upper bounds (numbers and strings; other types as text), and how
 *       many delete files apply to each.
 *   <li>{@code snapshot-rows}: every snapshot's row count, each read by time travel.
 *   <li>{@code delete-rows --column C --values V1,V2 --mode position|equality}: deletes the
 *       rows whose column C (a top-level int, long or string column) has one of the values,
 *       by position deletes (one file per data file that has such rows) or by equality
 *       deletes on C (one file per partition), in one row-delta commit.
 * </ul>
 */
final class TableFiles {
  private TableFiles() {}

  static String files(Table table) throws IOException {
    Schema schema = table.schema();
    List<Map<String, Object>> files = new ArrayList<>();
    try (CloseableIterable<FileScanTask> tasks = table.newScan().includeColumnStats().planFiles()) {
      for (FileScanTask task : tasks) {
        DataFile file = task.file();
        Map<String, Object> out = CanonicalJson.object();
        out.put("path", file.location());
        out.put("partition", table.specs().get(file.specId()).partitionToPath(file.partition()));
        out.put("spec_id", file.specId());
        out.put("record_count", file.recordCount());
        out.put("file_size", file.fileSizeInBytes());
        out.put("delete_files", task.deletes().size());
        Map<String, Object> values = CanonicalJson.object();
        Map<String, Object> nulls = CanonicalJson.object();
        Map<String, Object> lower = CanonicalJson.object();
        Map<String, Object> upper = CanonicalJson.object();
        for (Types.NestedField field : schema.columns()) {
          int id = field.fieldId();
          if (file.valueCounts() != null && file.valueCounts().containsKey(id)) {
            values.put(field.name(), file.valueCounts().get(id));
          }
          if (file.nullValueCounts() != null && file.nullValueCounts().containsKey(id)) {
            nulls.put(field.name(), file.nullValueCounts().get(id));
          }
          putBound(lower, field, file.lowerBounds());
          putBound(upper, field, file.upperBounds());
        }
        out.put("value_counts", values);
        out.put("null_counts", nulls);
        out.put("lower_bounds", lower);
        out.put("upper_bounds", upper);
        files.add(out);
      }
    }
    files.sort(Comparator.comparing(f -> (String) f.get("path")));
    Map<String, Object> doc = CanonicalJson.object();
    doc.put("files", files);
    return CanonicalJson.write(doc);
  }

  private static void putBound(Map<String, Object> out, Types.NestedField field, Map<Integer, ByteBuffer> bounds) {
    if (bounds == null || !bounds.containsKey(field.fieldId()) || !field.type().isPrimitiveType()) {
      return;
    }
    Object value = Conversions.fromByteBuffer(field.type(), bounds.get(field.fieldId()));
    switch (field.type().typeId()) {
      case INTEGER:
      case LONG:
        out.put(field.name(), ((Number) value).longValue());
        break;
      case FLOAT:
      case DOUBLE:
        out.put(field.name(), TableDump.value(field.type(), value));
        break;
      default:
        out.put(field.name(), value.toString());
    }
  }

  /** Every snapshot's row count, read by time travel to it: {"snapshot_id": rows}. */
  static String snapshotRows(Table table) throws IOException {
    Map<String, Object> doc = CanonicalJson.object();
    for (org.apache.iceberg.Snapshot snapshot : table.snapshots()) {
      long rows = 0;
      try (CloseableIterable<Record> records =
          org.apache.iceberg.data.IcebergGenerics.read(table).useSnapshot(snapshot.snapshotId()).build()) {
        for (Record ignored : records) {
          rows++;
        }
      }
      doc.put(Long.toString(snapshot.snapshotId()), rows);
    }
    return CanonicalJson.write(doc);
  }

  /**
   * Counts of a large table without dumping its rows: rows, snapshots, and for one integer
   * column its distinct count, min, max and sum; with a summary key, that key's values along
   * the main branch, newest snapshot first (snapshots without it left out).
   */
  static String columnStats(String name, Table table, String column, String summaryKey) throws IOException {
    Set<Long> distinct = new java.util.HashSet<>();
    long rows = 0;
    long nulls = 0;
    Long min = null;
    Long max = null;
    long sum = 0;
    try (CloseableIterable<Record> records =
        org.apache.iceberg.data.IcebergGenerics.read(table).select(column).build()) {
      for (Record record : records) {
        rows++;
        Object value = record.getField(column);
        if (value == null) {
          nulls++;
          continue;
        }
        long v = ((Number) value).longValue();
        distinct.add(v);
        min = min == null ? v : Math.min(min, v);
        max = max == null ? v : Math.max(max, v);
        sum += v;
      }
    }
    Map<String, Object> doc = CanonicalJson.object();
    doc.put("table", name);
    int snapshots = 0;
    for (org.apache.iceberg.Snapshot ignored : table.snapshots()) {
      snapshots++;
    }
    doc.put("snapshots", snapshots);
    doc.put("rows", rows);
    doc.put("nulls", nulls);
    doc.put("distinct", (long) distinct.size());
    doc.put("min", min);
    doc.put("max", max);
    doc.put("sum", rows == nulls ? null : sum);
    if (summaryKey != null) {
      List<Object> values = new ArrayList<>();
      for (org.apache.iceberg.Snapshot snapshot :
          org.apache.iceberg.util.SnapshotUtil.currentAncestors(table)) {
        String value = snapshot.summary().get(summaryKey);
        if (value != null) {
          values.add(value);
        }
      }
      doc.put("summary_values", values);
    }
    return CanonicalJson.write(doc);
  }

  static String deleteRows(Table table, String column, Set<String> values, String mode)
      throws IOException, Main.UsageException {
    Schema schema = table.schema();
    Types.NestedField field = schema.findField(column);
    if (field == null) {
      throw new Main.UsageException("no column '" + column + "'");
    }
    Type.TypeID type = field.type().typeId();
    if (type != Type.TypeID.INTEGER && type != Type.TypeID.LONG && type != Type.TypeID.STRING) {
      throw new Main.UsageException("--column must be an int, long or string column");
    }
    List<DeleteFile> deletes = new ArrayList<>();
    long deleted = 0;
    // Data files by partition (for equality deletes) and their rows to delete (for positions).
    Map<String, FileScanTask> partitions = new LinkedHashMap<>();
    try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
      for (FileScanTask task : tasks) {
        DataFile file = task.file();
        PartitionSpec spec = table.specs().get(file.specId());
        partitions.putIfAbsent(file.specId() + "/" + spec.partitionToPath(file.partition()), task);
        if (!"position".equals(mode)) {
          continue;
        }
        List<Long> positions = new ArrayList<>();
        try (CloseableIterable<Record> rows =
            Parquet.read(table.io().newInputFile(file.location()))
                .project(schema)
                .createReaderFunc(fileSchema -> GenericParquetReaders.buildReader(schema, fileSchema))
                .build()) {
          long position = 0;
          for (Record row : rows) {
            Object value = row.getField(column);
            if (value != null && values.contains(value.toString())) {
              positions.add(position);
            }
            position++;
          }
        }
        if (positions.isEmpty()) {
          continue;
        }
        GenericFileWriterFactory factory =
            new GenericFileWriterFactory.Builder(table).deleteFileFormat(FileFormat.PARQUET).build();
        PositionDeleteWriter<Record> writer =
            factory.newPositionDeleteWriter(output(table), spec, file.partition());
        PositionDelete<Record> delete = PositionDelete.create();
        try (PositionDeleteWriter<Record> w = writer) {
          for (long position : positions) {
            w.write(delete.set(file.location(), position));
          }
        }
        deletes.add(writer.toDeleteFile());
        deleted += positions.size();
      }
    }
    if ("equality".equals(mode)) {
      Schema keySchema = schema.select(column);
      for (FileScanTask task : partitions.values()) {
        DataFile file = task.file();
        PartitionSpec spec = table.specs().get(file.specId());
        GenericFileWriterFactory factory =
            new GenericFileWriterFactory.Builder(table)
                .deleteFileFormat(FileFormat.PARQUET)
                .equalityFieldIds(new int[] {field.fieldId()})
                .equalityDeleteRowSchema(keySchema)
                .build();
        EqualityDeleteWriter<Record> writer =
            factory.newEqualityDeleteWriter(output(table), spec, file.partition());
        try (EqualityDeleteWriter<Record> w = writer) {
          for (String value : values) {
            Record key = org.apache.iceberg.data.GenericRecord.create(keySchema);
            key.setField(column, parse(type, value));
            w.write(key);
          }
        }
        deletes.add(writer.toDeleteFile());
      }
    } else if (!"position".equals(mode)) {
      throw new Main.UsageException("--mode must be position or equality");
    }
    RowDelta delta = table.newRowDelta();
    for (DeleteFile file : deletes) {
      delta.addDeletes(file);
    }
    delta.commit();
    Map<String, Object> doc = CanonicalJson.object();
    doc.put("delete_files", deletes.size());
    doc.put("positions", deleted);
    return CanonicalJson.write(doc);
  }

  private static Object parse(Type.TypeID type, String value) {
    switch (type) {
      case INTEGER:
        return Integer.parseInt(value);
      case LONG:
        return Long.parseLong(value);
      default:
        return value;
    }
  }

  private static EncryptedOutputFile output(Table table) {
    String path = table.locationProvider().newDataLocation("delete-" + UUID.randomUUID() + ".parquet");
    return EncryptedFiles.plainAsEncryptedOutput(table.io().newOutputFile(path));
  }
}
