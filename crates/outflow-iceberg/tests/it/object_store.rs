//! Iceberg tables in an object store: the S3 store the test script starts (SeaweedFS, with
//! SigV4 keys), reached through the SQLite catalog, read back from the store by PyIceberg
//! and Java Iceberg.

use std::collections::BTreeMap;

use crate::common::*;
use outflow_iceberg::schema::parse_table_ident;
use outflow_iceberg::{CatalogConfig, IcebergCatalog};
use outflow_testkit::iceberg::{GcsStore, OwnSeaweed, Reader, S3Store, TestCatalog, file_paths, sorted_ids};
use outflow_testkit::unique_name;

fn catalog_in(dir: &std::path::Path, warehouse: &str, properties: BTreeMap<String, String>) -> CatalogConfig {
    CatalogConfig::Sql {
        uri: dir.join("catalog.db").display().to_string(),
        warehouse: warehouse.to_string(),
        name: "outflow".into(),
        properties,
    }
}

/// The independent readers of the catalog [`catalog_in`] makes.
fn readers_in(dir: &std::path::Path, warehouse: &str, properties: BTreeMap<String, String>) -> TestCatalog {
    TestCatalog::SqlInStore {
        name: "outflow".into(),
        db: dir.join("catalog.db"),
        warehouse: warehouse.to_string(),
        properties,
    }
}

/// Where `table`'s files live, as its metadata says.
async fn table_location(catalog: &IcebergCatalog, table: &str) -> String {
    catalog
        .require_table(&parse_table_ident(table).unwrap())
        .await
        .unwrap()
        .metadata()
        .location()
        .to_string()
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

    let readers = readers_in(dir.path(), &warehouse, s3.properties());
    let read = readers.read_both(table);
    assert_eq!(read["row_count"], 150);
    let ids = sorted_ids(&read);
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

    let readers = readers_in(dir.path(), &warehouse, s3.properties());
    let read = readers.read_both("lake.landed");
    assert_eq!(read["row_count"], 130);
    let ids = sorted_ids(&read);
    assert_eq!(ids, (0..130).collect::<Vec<_>>());
    let files = readers.pyiceberg_files("lake.landed");
    let paths = file_paths(&files);
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

/// How the store fails in [`store_failing_mid_write`].
enum StoreFailure {
    /// A proxy in front of the shared store cuts its connections and answers every request
    /// with 503, then passes them again.
    Unavailable(outflow_testkit::faults::FaultyEndpoint),
    /// A store of the test's own is killed by its PID, then started again on its data.
    Killed(OwnSeaweed),
}

impl StoreFailure {
    async fn unavailable() -> StoreFailure {
        let s3 = S3Store::from_env();
        let proxy =
            outflow_testkit::faults::FaultyEndpoint::switchable(s3.endpoint.trim_start_matches("http://"))
                .await;
        StoreFailure::Unavailable(proxy)
    }

    /// The store itself, past any proxy.
    fn store(&self) -> S3Store {
        match self {
            StoreFailure::Unavailable(_) => S3Store::from_env(),
            StoreFailure::Killed(own) => own.store().clone(),
        }
    }

    /// The endpoint the sink writes to.
    fn endpoint(&self) -> String {
        match self {
            StoreFailure::Unavailable(proxy) => proxy.url(),
            StoreFailure::Killed(own) => own.store().endpoint.clone(),
        }
    }

    fn fail(&mut self) {
        match self {
            StoreFailure::Unavailable(proxy) => proxy.fail_with(503),
            StoreFailure::Killed(own) => own.kill(),
        }
    }

    fn recover(&mut self) {
        match self {
            StoreFailure::Unavailable(proxy) => proxy.pass(),
            StoreFailure::Killed(own) => own.start_again(),
        }
    }
}

/// The store failing in the middle of a write, two ways at once (each mostly waits out the
/// storage's retries): answering 503, and killed by its PID then started again. After its
/// retries the write fails, nothing is committed, every data file already in the store was
/// deleted or is named by the abort, and once the store answers again a rerun writes every
/// row exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_mid_write_commits_nothing_and_names_what_it_leaves() {
    let unavailable = StoreFailure::unavailable().await;
    let killed = StoreFailure::Killed(OwnSeaweed::start());
    tokio::join!(
        store_failing_mid_write(unavailable, &["503", "unexpected"]),
        store_failing_mid_write(killed, &["connect", "refused", "unexpected"]),
    );
}

/// Writes until a data file has reached the store, makes the store fail, and checks the
/// failed write, its abort and a rerun (above); the write's error holds one of `expected`.
async fn store_failing_mid_write(mut failure: StoreFailure, expected: &[&str]) {
    use outflow_core::{Sink, TwoPhaseSink};
    use outflow_store::{ObjectStore, ObjectUrl, StorageSettings};

    let s3 = failure.store();
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{}/{}", s3.bucket, unique_name("fault"));
    let mut sink_properties = s3.properties();
    sink_properties.insert("s3.endpoint".into(), failure.endpoint());
    let config = catalog_in(dir.path(), &warehouse, sink_properties);
    let table = "lake.faults";
    let build = || {
        options(&config, table)
            .target_file_size_bytes(64 * 1024)
            .build()
            .unwrap()
    };
    // What is in the store, seen past any proxy.
    let settings: StorageSettings = s3.properties().into_iter().collect();
    let root = ObjectUrl::parse(&warehouse, "test").unwrap();
    let store = ObjectStore::open(&root, &settings, "test").unwrap();
    let data_files = || {
        let (store, root) = (store.clone(), root.clone());
        async move {
            let all = store.list(&root).await.unwrap();
            all.into_iter()
                .map(|e| e.url.to_string())
                .filter(|u| u.contains("/data/") && u.ends_with(".parquet"))
                .collect::<Vec<_>>()
        }
    };

    let mut sink = sink(build()).await;
    let mut next = 0;
    while data_files().await.is_empty() {
        assert!(next < 1_000_000, "no data file reached the store");
        sink.write(events(next..next + 5_000, "eu")).await.unwrap();
        next += 5_000;
    }
    failure.fail();
    let failed = async {
        sink.write(events(next..next + 5_000, "eu")).await?;
        sink.prepare_commit().await
    }
    .await;
    let Err(err) = failed else {
        panic!("the write went through while the store was failing");
    };
    let aborted = sink.abort().await;
    failure.recover();

    let message = err.to_string();
    assert!(
        expected.iter().any(|e| message.to_lowercase().contains(e)),
        "{message}"
    );
    let left = data_files().await;
    assert!(!left.is_empty());
    let named = aborted.left.join("\n");
    for url in &left {
        let key = url.split_once(&format!("{}/", s3.bucket)).unwrap().1;
        assert!(
            named.contains(key),
            "{url} is left in the store but not named: {aborted:?}"
        );
    }
    let readers = readers_in(dir.path(), &warehouse, s3.properties());
    let committed = readers.try_read(Reader::PyIceberg, table);
    assert!(
        committed.as_ref().is_none_or(|r| r["row_count"] == 0),
        "something was committed: {committed:?}"
    );

    // The rerun, with the store answering.
    let rows = next + 5_000;
    write_all(
        build(),
        vec![events(0..rows / 2, "eu"), events(rows / 2..rows, "eu")],
    )
    .await
    .unwrap();
    let read = readers.read_both(table);
    assert_eq!(read["row_count"], rows);
    let mut ids = sorted_ids(&read);
    ids.dedup();
    assert_eq!(ids.len() as i64, rows);
    let referenced = readers.pyiceberg_files(table);
    let referenced = file_paths(&referenced);
    assert!(
        referenced.iter().all(|p| !left.iter().any(|l| l == p)),
        "the rerun reused a file left behind"
    );
}

/// `remove_orphans` on a table in S3: it lists the table's objects in the store, keeps every
/// one a snapshot or the metadata references, and deletes the old unreferenced ones (here:
/// all, the safety age set ahead of now), which a dry run lists first; both readers read
/// the same rows after.
#[tokio::test]
async fn remove_orphans_lists_and_deletes_unreferenced_objects_of_a_table_in_s3() {
    use outflow_iceberg::maintenance::{RemoveOrphansOptions, remove_orphans};
    use outflow_store::{ObjectStore, ObjectUrl, StorageSettings};

    let s3 = S3Store::from_env();
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{}/{}", s3.bucket, unique_name("orphans"));
    let config = catalog_in(dir.path(), &warehouse, s3.properties());
    let table = "lake.kept";
    for ids in [0..50, 50..80] {
        write_all(options(&config, table).build().unwrap(), vec![events(ids, "eu")])
            .await
            .unwrap();
    }
    let catalog = IcebergCatalog::connect(&config).await.unwrap();
    let location = table_location(&catalog, table).await;
    let settings: StorageSettings = s3.properties().into_iter().collect();
    let root = ObjectUrl::parse(&location, "test").unwrap();
    let store = ObjectStore::open(&root, &settings, "test").unwrap();
    let orphan_keys = [
        format!("{}/data/left-by-a-killed-writer.parquet", root.key()),
        format!("{}/metadata/snap-lost-race.avro", root.key()),
    ];
    for key in &orphan_keys {
        store.operator().write(key, b"orphan".to_vec()).await.unwrap();
    }
    let expected: Vec<String> = orphan_keys
        .iter()
        .map(|k| root.with_key(k.clone()).to_string())
        .collect();
    let before = store.list(&root).await.unwrap().len();

    let run = |dry_run: bool, older_than_ms: i64| {
        let catalog = catalog.clone();
        async move {
            let options = RemoveOrphansOptions {
                older_than_ms,
                dry_run,
            };
            remove_orphans(&catalog, table, &options, &outflow_core::RetryPolicy::default())
                .await
                .unwrap()
        }
    };
    let ahead = chrono::Utc::now().timestamp_millis() + 60_000;
    let young = run(true, 0).await;
    assert_eq!((young.orphans.len(), young.too_young), (0, 2), "{young:?}");
    let planned = run(true, ahead).await;
    assert_eq!(planned.orphans, expected, "{planned:?}");
    assert_eq!(planned.files, before);
    assert_eq!(
        store.list(&root).await.unwrap().len(),
        before,
        "a dry run deleted something"
    );

    let done = run(false, ahead).await;
    assert_eq!((done.orphans, done.not_deleted.len()), (expected.clone(), 0));
    let after: Vec<String> = store
        .list(&root)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.url.to_string())
        .collect();
    assert_eq!(after.len(), before - 2);
    assert!(expected.iter().all(|o| !after.contains(o)));
    let readers = readers_in(dir.path(), &warehouse, s3.properties());
    assert_eq!(readers.read_both(table)["row_count"], 80);
}

/// Google Cloud Storage (fake-gcs-server), end to end in one table's life: the sink writes
/// into a `gs://` warehouse, AddFiles registers objects already in the bucket (a prefix
/// and a glob) into the same table, and remove-orphans deletes an unreferenced object;
/// PyIceberg and Java Iceberg read every row back from the store after each step.
#[tokio::test]
async fn a_table_in_gcs_is_written_added_to_and_cleaned_and_both_readers_read_it() {
    use outflow_iceberg::add_files::{AddFiles, AddFilesOptions};
    use outflow_iceberg::maintenance::{RemoveOrphansOptions, remove_orphans};
    use outflow_store::{ObjectStore, ObjectUrl, StorageSettings};

    let gcs = GcsStore::from_env();
    let dir = tempfile::tempdir().unwrap();
    let root = format!("gs://{}/{}", gcs.bucket, unique_name("gcs"));
    let warehouse = format!("{root}/warehouse");
    let config = catalog_in(dir.path(), &warehouse, gcs.properties());
    let table = "lake.mixed";
    write_all(
        options(&config, table)
            .table_options(partitioned(&["region"]))
            .build()
            .unwrap(),
        vec![events(0..100, "eu")],
    )
    .await
    .unwrap();
    let readers = readers_in(dir.path(), &warehouse, gcs.properties());
    assert_eq!(readers.read_both(table)["row_count"], 100);

    let settings: StorageSettings = gcs.properties().into_iter().collect();
    let landing = ObjectUrl::parse(&format!("{root}/landing"), "test").unwrap();
    let store = ObjectStore::open(&landing, &settings, "test").unwrap();
    for (name, ids) in [
        ("day=1/a.parquet", 100..130),
        ("day=2/b.parquet", 130..150),
        ("c.parquet", 150..155),
    ] {
        gcs.upload(
            &format!("{}/{name}", landing.key()),
            &parquet_bytes(&events(ids, "us")),
        );
    }
    gcs.upload(&format!("{}/_SUCCESS", landing.key()), b"");
    let add = AddFiles::connect(
        AddFilesOptions::builder()
            .catalog(config.clone())
            .table(table)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let result = add
        .run(&[
            format!("{landing}/day=1/"),
            format!("{landing}/day=2/*.parquet"),
            format!("{landing}/c.parquet"),
        ])
        .await
        .unwrap();
    assert_eq!((result.files_added, result.records_added), (3, 55), "{result:?}");
    assert!(result.errors.is_empty(), "{result:?}");
    let read = readers.read_both(table);
    let ids = sorted_ids(&read);
    assert_eq!(ids, (0..155).collect::<Vec<_>>());
    let files = readers.pyiceberg_files(table);
    let paths = file_paths(&files);
    assert!(
        paths.contains(&format!("{landing}/c.parquet").as_str()),
        "{paths:?}"
    );
    // The sink's files of the partitioned table sit directly under data/ (see
    // TrackedLocations): no `region=eu` directory, whose name GCS would get mangled.
    let written: Vec<&&str> = paths
        .iter()
        .filter(|p| !p.starts_with(&landing.to_string()))
        .collect();
    assert_eq!(written.len(), 1, "{paths:?}");
    assert!(
        written[0].starts_with(&format!("{warehouse}/lake/mixed/data/outflow-")),
        "{paths:?}"
    );

    // An object a killed writer left in the table's data directory is an orphan.
    let catalog = IcebergCatalog::connect(&config).await.unwrap();
    let location = table_location(&catalog, table).await;
    let table_root = ObjectUrl::parse(&location, "test").unwrap();
    let orphan = table_root.with_key(format!("{}/data/left-behind.parquet", table_root.key()));
    gcs.upload(orphan.key(), b"orphan");
    let options = RemoveOrphansOptions {
        older_than_ms: chrono::Utc::now().timestamp_millis() + 60_000,
        dry_run: false,
    };
    let removed = remove_orphans(&catalog, table, &options, &outflow_core::RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(removed.orphans, [orphan.to_string()], "{removed:?}");
    assert!(
        store.stat(&orphan).await.unwrap().is_none(),
        "the orphan is still there"
    );
    assert_eq!(readers.read_both(table)["row_count"], 155);
}
