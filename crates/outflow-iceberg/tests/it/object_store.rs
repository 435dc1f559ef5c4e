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

/// Parquet bytes of `batch`.
fn parquet_bytes(batch: &arrow_array::RecordBatch) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(batch).unwrap();
    writer.close().unwrap();
    bytes
}

/// AddFiles registers objects already in the store: a prefix (every `.parquet` object
/// under it, markers left out), a glob and a single URL; the table it creates lives in an
/// S3 warehouse, PyIceberg reads every row back and sees the objects' URLs as given; a
/// rerun registers nothing twice, and an object that is missing or not Parquet is an error
/// naming it.
#[tokio::test]
async fn add_files_registers_objects_by_prefix_glob_and_url() {
    use outflow_iceberg::add_files::{AddFiles, AddFilesOptions, SkipReason};
    use outflow_store::{ObjectStore, ObjectUrl, StorageSettings};

    let s3 = S3Store::from_env();
    let dir = tempfile::tempdir().unwrap();
    let root = format!("s3://{}/{}", s3.bucket, unique_name("addfiles"));
    let settings: StorageSettings = s3.properties().into_iter().collect();
    let store = ObjectStore::open(&ObjectUrl::parse(&root, "test").unwrap(), &settings, "test").unwrap();
    let key = |name: &str| {
        format!(
            "{}/{name}",
            root.split_once(&format!("{}/", s3.bucket)).unwrap().1
        )
    };
    let objects = [
        ("raw/day=1/a.parquet", parquet_bytes(&events(0..40, "eu"))),
        ("raw/day=1/b.parquet", parquet_bytes(&events(40..70, "eu"))),
        ("raw/day=2/c.parquet", parquet_bytes(&events(70..100, "us"))),
        ("raw/_SUCCESS", Vec::new()),
        ("raw/day=2/notes.txt", b"not data".to_vec()),
        ("more/d.parquet", parquet_bytes(&events(100..110, "us"))),
        ("more/e.parquet", parquet_bytes(&events(110..125, "us"))),
        ("one/f.parquet", parquet_bytes(&events(125..130, "eu"))),
        ("one/broken.parquet", b"PAR1 this is not a footer".to_vec()),
    ];
    for (name, bytes) in &objects {
        store.operator().write(&key(name), bytes.clone()).await.unwrap();
    }

    let warehouse = format!("{root}/warehouse");
    let config = catalog_in(dir.path(), &warehouse, s3.properties());
    let add = AddFiles::connect(
        AddFilesOptions::builder()
            .catalog(config)
            .table("lake.landed")
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let inputs = [
        format!("{root}/raw/"),
        format!("{root}/more/*.parquet"),
        format!("{root}/one/f.parquet"),
        format!("{root}/one/broken.parquet"),
        format!("{root}/one/missing.parquet"),
    ];
    let result = add.run(&inputs).await.unwrap();
    assert_eq!(
        (result.files_given, result.files_added, result.records_added),
        (8, 6, 130),
        "{result:?}"
    );
    assert!(result.table_created);
    let errors: Vec<&str> = result.errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(errors, [inputs[3].as_str(), inputs[4].as_str()], "{result:?}");
    assert!(
        result.errors[1].reason.contains("does not exist"),
        "{:?}",
        result.errors[1]
    );

    let readers = TestCatalog::SqlInStore {
        name: "outflow".into(),
        db: dir.path().join("catalog.db"),
        warehouse,
        properties: s3.properties(),
    };
    let read = readers.read(Reader::PyIceberg, "lake.landed");
    assert_eq!(read["row_count"], 130);
    let mut ids: Vec<i64> = read_rows(&read)
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..130).collect::<Vec<_>>());
    let files = readers.pyiceberg_files("lake.landed");
    let paths: Vec<&str> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = [
        "more/d.parquet",
        "more/e.parquet",
        "one/f.parquet",
        "raw/day=1/a.parquet",
        "raw/day=1/b.parquet",
        "raw/day=2/c.parquet",
    ]
    .iter()
    .map(|name| format!("{root}/{name}"))
    .collect();
    assert_eq!(paths, expected);
    let sizes: Vec<u64> = files["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["file_size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes[0], objects[5].1.len() as u64);

    // A rerun: every object is already registered.
    let again = add.run(&inputs[..3]).await.unwrap();
    assert_eq!(again.files_added, 0, "{again:?}");
    assert_eq!(again.skipped.len(), 6);
    assert!(
        again
            .skipped
            .iter()
            .all(|s| s.reason == SkipReason::AlreadyRegistered)
    );
    assert_eq!(readers.read(Reader::PyIceberg, "lake.landed")["row_count"], 130);

    // A prefix with no Parquet object under it is an error for that input.
    let empty = add.run(&[format!("{root}/nothing-here/")]).await.unwrap();
    assert!(
        empty.errors[0].reason.contains("no Parquet object matches"),
        "{empty:?}"
    );
}
