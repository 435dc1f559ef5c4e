package outflow.reader;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;

/**
 * Command line of the Java reader used by Outflow's integration tests.
 *
 * <pre>
 * java -jar reader.jar read --catalog-type sql|rest --catalog-name NAME --uri URI
 *     [--warehouse file:///abs/dir] --table ns.name [--property key=value ...]
 * </pre>
 *
 * <p>{@code files}, {@code snapshot-rows} and {@code delete-rows} take the same options (see {@link TableFiles});
 * {@code delete-rows} is the one verb that changes the table.
 *
 * <p>Prints one canonical JSON document (see {@link TableDump}) on stdout; exits non-zero with a
 * message on stderr when anything fails.
 *
 * <p>{@code java -jar reader.jar serve} answers many reads in one JVM, so that a test binary
 * pays for starting Java once: each line on stdin is one {@code read}'s arguments separated
 * by tabs, and each answer is one line on stdout, {@code {"ok":true,"doc":DOCUMENT}} or
 * {@code {"ok":false,"error":MESSAGE}}. It ends at the end of stdin.
 */
public final class Main {
  private Main() {}

  private static final String USAGE =
      "usage: reader.jar read --catalog-type sql|rest --catalog-name NAME --uri URI"
          + " [--warehouse file:///DIR] --table NS.NAME [--property KEY=VALUE ...]";

  public static void main(String[] args) {
    int code;
    try {
      code = run(args);
    } catch (UsageException e) {
      System.err.println("reader: " + e.getMessage());
      System.err.println(USAGE);
      code = 2;
    } catch (Throwable t) {
      System.err.println("reader: failed: " + t);
      t.printStackTrace(System.err);
      code = 1;
    }
    System.out.flush();
    System.exit(code);
  }

  static final class UsageException extends Exception {
    UsageException(String message) {
      super(message);
    }
  }

  private static int run(String[] args) throws Exception {
    if (args.length == 0) {
      throw new UsageException("missing subcommand");
    }
    if ("serve".equals(args[0])) {
      serve();
      return 0;
    }
    PrintStream out =
        new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    out.print(read(args));
    out.print('\n');
    out.flush();
    return 0;
  }

  private static void serve() throws IOException {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out =
        new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    String line;
    while ((line = in.readLine()) != null) {
      String answer;
      try {
        answer = "{\"ok\":true,\"doc\":" + read(line.split("\t", -1)) + "}";
      } catch (Throwable t) {
        t.printStackTrace(System.err);
        answer = "{\"ok\":false,\"error\":" + CanonicalJson.write(t.toString()) + "}";
      }
      out.print(answer);
      out.print('\n');
      out.flush();
    }
  }

  /** One {@code read}: the table's canonical JSON document. */
  private static String read(String[] args) throws Exception {
    String verb = args[0];
    if (!Arrays.asList("read", "files", "snapshot-rows", "delete-rows", "column-stats").contains(verb)) {
      throw new UsageException("unknown subcommand '" + verb + "'");
    }
    Map<String, String> opts = new HashMap<>();
    List<String> extraProps = new ArrayList<>();
    for (int i = 1; i < args.length; i++) {
      String arg = args[i];
      if (!arg.startsWith("--") || i + 1 >= args.length) {
        throw new UsageException("unexpected argument '" + arg + "'");
      }
      String key = arg.substring(2);
      String value = args[++i];
      // --catalog-property as PyIceberg's tool spells it.
      if (key.equals("property") || key.equals("catalog-property")) {
        extraProps.add(value);
      } else if (Arrays.asList(
              "catalog-type", "catalog-name", "uri", "warehouse", "table", "column", "values", "mode",
              "summary-key")
          .contains(key)) {
        opts.put(key, value);
      } else {
        throw new UsageException("unknown option '" + arg + "'");
      }
    }
    for (String required : List.of("catalog-type", "catalog-name", "uri", "table")) {
      if (!opts.containsKey(required)) {
        throw new UsageException("missing --" + required);
      }
    }

    Map<String, String> props = new HashMap<>();
    String type = opts.get("catalog-type");
    String uri = opts.get("uri");
    switch (type) {
      case "sql":
        if (!opts.containsKey("warehouse")) {
          throw new UsageException("--warehouse is required for --catalog-type sql");
        }
        props.put(CatalogUtil.ICEBERG_CATALOG_TYPE, CatalogUtil.ICEBERG_CATALOG_TYPE_JDBC);
        String jdbc = jdbcUri(uri);
        if (jdbc.startsWith("jdbc:sqlite:")) {
          String path = jdbc.substring("jdbc:sqlite:".length());
          // sqlite-jdbc would create an empty file on connect; a reader must not.
          if (!path.isEmpty()
              && !path.contains(":memory:")
              && !path.startsWith("file:")
              && !new java.io.File(path).exists()) {
            throw new UsageException("catalog file " + path + " does not exist");
          }
        }
        props.put(CatalogProperties.URI, jdbc);
        // A reader must never change the catalog: do not create the catalog tables, and leave
        // jdbc.schema-version unset so JdbcCatalog does not ALTER an older (V0) layout. A file
        // created by PyIceberg's SqlCatalog already has the V1 layout (iceberg_type column).
        props.put("jdbc.init-catalog-tables", "false");
        break;
      case "rest":
        props.put(CatalogUtil.ICEBERG_CATALOG_TYPE, CatalogUtil.ICEBERG_CATALOG_TYPE_REST);
        props.put(CatalogProperties.URI, uri);
        break;
      default:
        throw new UsageException("--catalog-type must be sql or rest, not '" + type + "'");
    }
    if (opts.containsKey("warehouse")) {
      props.put(CatalogProperties.WAREHOUSE_LOCATION, opts.get("warehouse"));
    }
    for (String kv : extraProps) {
      int eq = kv.indexOf('=');
      if (eq <= 0) {
        throw new UsageException("--property wants KEY=VALUE, got '" + kv + "'");
      }
      props.put(kv.substring(0, eq), kv.substring(eq + 1));
    }
    // Tables in object stores: ResolvingFileIO (in GcsEofFileIO) picks S3FileIO for s3:// and GCSFileIO for
    // gs:// by each file's scheme. The properties come in iceberg-rust's names; Java names
    // the S3 region client.region and the GCS endpoint gcs.service.host.
    boolean s3 = props.keySet().stream().anyMatch(k -> k.startsWith("s3."));
    boolean gcs = props.keySet().stream().anyMatch(k -> k.startsWith("gcs."));
    if (s3 || gcs) {
      props.putIfAbsent(CatalogProperties.FILE_IO_IMPL, GcsEofFileIO.class.getName());
    }
    if (props.containsKey("s3.region")) {
      props.putIfAbsent("client.region", props.get("s3.region"));
    }
    if (props.containsKey("gcs.service.path")) {
      props.putIfAbsent("gcs.service.host", props.get("gcs.service.path"));
    }
    if (gcs) {
      // A project of its own, so the client does not look for one on a metadata server.
      props.putIfAbsent("gcs.project-id", "outflow-test");
    }

    String tableName = opts.get("table");
    TableIdentifier ident = parseIdentifier(tableName);
    Catalog catalog =
        CatalogUtil.buildIcebergCatalog(opts.get("catalog-name"), props, new Configuration());
    try {
      Table table = catalog.loadTable(ident);
      switch (verb) {
        case "files":
          return TableFiles.files(table);
        case "snapshot-rows":
          return TableFiles.snapshotRows(table);
        case "column-stats":
          if (!opts.containsKey("column")) {
            throw new UsageException("column-stats needs --column");
          }
          return TableFiles.columnStats(
              tableName, table, opts.get("column"), opts.get("summary-key"));
        case "delete-rows":
          for (String required : List.of("column", "values", "mode")) {
            if (!opts.containsKey(required)) {
              throw new UsageException("delete-rows needs --" + required);
            }
          }
          return TableFiles.deleteRows(
              table,
              opts.get("column"),
              new java.util.HashSet<>(Arrays.asList(opts.get("values").split(","))),
              opts.get("mode"));
        default:
          return TableDump.dump(tableName, table);
      }
    } finally {
      if (catalog instanceof AutoCloseable) {
        ((AutoCloseable) catalog).close();
      }
    }
  }

  /** Accepts a JDBC URI as is; turns PyIceberg's SQLAlchemy form sqlite:////abs into JDBC's. */
  static String jdbcUri(String uri) {
    if (uri.startsWith("jdbc:")) {
      return uri;
    }
    if (uri.startsWith("sqlite:///")) {
      return "jdbc:sqlite:" + uri.substring("sqlite:///".length());
    }
    return uri;
  }

  static TableIdentifier parseIdentifier(String name) throws UsageException {
    String[] parts = name.split("\\.", -1);
    if (parts.length < 2) {
      throw new UsageException("--table must be NAMESPACE.NAME, got '" + name + "'");
    }
    for (String p : parts) {
      if (p.isEmpty()) {
        throw new UsageException("--table has an empty part: '" + name + "'");
      }
    }
    return TableIdentifier.of(
        Namespace.of(Arrays.copyOf(parts, parts.length - 1)), parts[parts.length - 1]);
  }
}
