package org.apache.iceberg.rest;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

/**
 * Launches Apache Iceberg's REST catalog test fixture (RESTServerCatalogAdapter over
 * RESTCatalogAdapter, served by RESTCatalogServlet) on a loopback address only.
 *
 * <p>It lives in the fixture's package because the fixture's adapter and its context class are
 * package-private; everything that speaks the REST protocol is Apache Iceberg's published code.
 * The fixture's own main binds every interface, which Outflow's test rules forbid.
 *
 * <pre>
 * OutflowLoopbackRestServer --uri jdbc:sqlite:/tmp/x/catalog.db --warehouse file:///tmp/x/wh
 *     [--host 127.0.0.1] [--port 0] [--port-file FILE] [--catalog-name rest_backend]
 *     [--property key=value ...]
 * </pre>
 *
 * With --port 0 the kernel picks a free port; the port actually bound is written to --port-file
 * (atomically) once the server accepts connections, and printed on stdout.
 */
public final class OutflowLoopbackRestServer {
  private OutflowLoopbackRestServer() {}

  public static void main(String[] args) throws Exception {
    String host = "127.0.0.1";
    int port = 0;
    String portFile = null;
    String catalogName = "rest_backend";
    Map<String, String> props = new HashMap<>();
    props.put(CatalogProperties.CATALOG_IMPL, JdbcCatalog.class.getName());
    // Fresh catalog files get the current JDBC layout (views supported).
    props.put("jdbc.schema-version", "V1");

    for (int i = 0; i < args.length; i++) {
      String key = args[i];
      if (i + 1 >= args.length) {
        usage("missing value for " + key);
      }
      String value = args[++i];
      switch (key) {
        case "--host":
          host = value;
          break;
        case "--port":
          port = Integer.parseInt(value);
          break;
        case "--port-file":
          portFile = value;
          break;
        case "--catalog-name":
          catalogName = value;
          break;
        case "--uri":
          props.put(CatalogProperties.URI, value);
          break;
        case "--warehouse":
          props.put(CatalogProperties.WAREHOUSE_LOCATION, value);
          break;
        case "--property":
          {
            int eq = value.indexOf('=');
            if (eq <= 0) {
              usage("--property wants KEY=VALUE");
            }
            props.put(value.substring(0, eq), value.substring(eq + 1));
            break;
          }
        default:
          usage("unknown option " + key);
      }
    }
    if (!props.containsKey(CatalogProperties.URI)
        || !props.containsKey(CatalogProperties.WAREHOUSE_LOCATION)) {
      usage("--uri and --warehouse are required");
    }
    if (!host.equals("127.0.0.1") && !host.equals("::1") && !host.equals("localhost")) {
      usage("refusing to bind a non-loopback host: " + host);
    }

    Catalog catalog = CatalogUtil.buildIcebergCatalog(catalogName, props, new Configuration());
    RESTCatalogAdapter adapter =
        new RESTServerCatalogAdapter(new RESTCatalogServer.CatalogContext(catalog, props));
    RESTCatalogServlet servlet = new RESTCatalogServlet(adapter);

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(servlet), "/*");
    server.setHandler(context);
    server.setStopAtShutdown(true);
    server.start();

    int bound = connector.getLocalPort();
    if (portFile != null) {
      Path target = Paths.get(portFile);
      Path tmp = target.resolveSibling(target.getFileName() + ".tmp");
      Files.write(tmp, (bound + "\n").getBytes(StandardCharsets.UTF_8));
      Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }
    System.out.println("iceberg REST catalog listening on http://" + host + ":" + bound);
    System.out.flush();

    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    adapter.close();
                  } catch (IOException e) {
                    // shutting down anyway
                  }
                }));
    server.join();
  }

  private static void usage(String message) {
    System.err.println("OutflowLoopbackRestServer: " + message);
    System.err.println(
        "usage: --uri JDBC_URI --warehouse LOCATION [--host 127.0.0.1] [--port N]"
            + " [--port-file FILE] [--catalog-name NAME] [--property KEY=VALUE ...]");
    System.exit(2);
  }
}
