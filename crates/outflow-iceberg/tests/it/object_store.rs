//! Iceberg tables in an object store: the S3 store the test script starts (SeaweedFS, with
//! SigV4 keys), reached through the SQLite catalog, read back by PyIceberg from the store.

use std::collections::BTreeMap;

use crate::common::*;
use outflow_iceberg::schema::parse_table_ident;
use outflow_iceberg::{CatalogConfig, IcebergCatalog};
use outflow_testkit::iceberg::{Reader, S3Store, TestCatalog};
use outflow_testkit::unique_name;

fn catalog_in(dir: &std::path::Path, warehouse: &str, properties: BTreeMap<String, String>) -> CatalogConfig {
    CatalogConfig::Sql {
        uri: dir.join("catalog.db").display().to_string(),
        warehouse: warehouse.to_string(),
        name: "outflow".into(),
        properties,
    }
}

#[tokio::test]
async fn the_sink_writes_a_table_into_an_s3_warehouse_pyiceberg_reads() {
    let s3 = S3Store::from_env();
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{}/{}", s3.bucket, unique_name("wh"));
    let config = catalog_in(dir.path(), &warehouse, s3.properties());
    let table = "lake.events";
    write_all(
        options(&config, table).build().unwrap(),
        vec![events(0..100, "eu"), events(100..150, "us")],
    )
    .await
    .unwrap();

    // Every file of the table is in the store.
    let catalog = IcebergCatalog::connect(&config).await.unwrap();
    let loaded = catalog
        .require_table(&parse_table_ident(table).unwrap())
        .await
        .unwrap();
    let metadata = loaded.metadata_location().unwrap().to_string();
    assert!(metadata.starts_with(&warehouse), "{metadata}");
    assert!(loaded.metadata().location().starts_with(&warehouse));
    assert!(!dir.path().join("warehouse").exists());

    let readers = TestCatalog::SqlInStore {
        name: "outflow".into(),
        db: dir.path().join("catalog.db"),
        warehouse: warehouse.clone(),
        properties: s3.properties(),
    };
    let read = readers.read(Reader::PyIceberg, table);
    assert_eq!(read["row_count"], 150);
    let mut ids: Vec<i64> = read_rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..150).collect::<Vec<_>>());

    // A wrong secret: the write fails, names no secret, and commits nothing.
    let mut wrong = s3.properties();
    wrong.insert("s3.secret-access-key".into(), "not-the-secret".into());
    let refused = catalog_in(dir.path(), &warehouse, wrong);
    let err = write_all(
        options(&refused, table).build().unwrap(),
        vec![events(150..160, "eu")],
    )
    .await
    .unwrap_err();
    let shown = format!("{err} {err:?} {refused:?}");
    assert!(!shown.contains("not-the-secret"), "{shown}");
    assert!(!shown.contains(&s3.secret_access_key), "{shown}");
    assert_eq!(readers.read(Reader::PyIceberg, table)["row_count"], 150);
}
