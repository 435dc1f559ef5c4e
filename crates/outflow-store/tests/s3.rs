//! Against the S3 store the test script starts (SeaweedFS, SigV4 keys): listings, globs,
//! ranged and streamed reads, Parquet footers and row groups, and the errors users see.

use std::io::Read;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use futures::StreamExt;
use outflow_core::ErrorKind;
use outflow_store::{ObjectParquet, ObjectStore, ObjectUrl, StorageSettings, blocking};
use outflow_testkit::iceberg::S3Store;
use outflow_testkit::unique_name;
use parquet::arrow::{ArrowWriter, ParquetRecordBatchStreamBuilder};

fn settings(s3: &S3Store) -> StorageSettings {
    s3.properties().into_iter().collect()
}

/// A fresh prefix in the test bucket, and the store.
fn prefix(s3: &S3Store) -> (ObjectStore, ObjectUrl) {
    let url = ObjectUrl::parse(&format!("s3://{}/{}/", s3.bucket, unique_name("store")), "test").unwrap();
    (ObjectStore::open(&url, &settings(s3), "test").unwrap(), url)
}

async fn put(store: &ObjectStore, url: &ObjectUrl, key: &str, bytes: Vec<u8>) -> ObjectUrl {
    let object = url.with_key(format!("{}{key}", url.key()));
    store.operator().write(object.key(), bytes).await.unwrap();
    object
}

fn keys(entries: &[outflow_store::ObjectEntry], under: &ObjectUrl) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.url.key().strip_prefix(under.key()).unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn listings_and_globs_give_sorted_objects_with_their_sizes() {
    let s3 = S3Store::from_env();
    let (store, dir) = prefix(&s3);
    for (key, body) in [
        ("in/b.csv", "id\n2\n"),
        ("in/a.csv", "id\n1\n"),
        ("in/sub/c.csv", "id\n3\n33\n"),
        ("in/_SUCCESS", ""),
        ("other.txt", "x"),
    ] {
        put(&store, &dir, key, body.as_bytes().to_vec()).await;
    }
    let listed = store
        .list(&dir.with_key(format!("{}in", dir.key())))
        .await
        .unwrap();
    assert_eq!(
        keys(&listed, &dir),
        ["in/_SUCCESS", "in/a.csv", "in/b.csv", "in/sub/c.csv"]
    );
    assert_eq!(listed[3].size, 8);
    assert!(listed[1].modified_ms > 1_700_000_000_000, "{:?}", listed[1]);

    let glob = |pattern: &str| dir.with_key(format!("{}{pattern}", dir.key()));
    let one_level = store.glob(&glob("in/*.csv"), "test").await.unwrap();
    assert_eq!(keys(&one_level, &dir), ["in/a.csv", "in/b.csv"]);
    let any_depth = store.glob(&glob("in/**/*.csv"), "test").await.unwrap();
    assert_eq!(keys(&any_depth, &dir), ["in/a.csv", "in/b.csv", "in/sub/c.csv"]);
    assert!(
        store
            .glob(&glob("in/*.parquet"), "test")
            .await
            .unwrap()
            .is_empty()
    );

    let found = store.stat(&glob("in/a.csv")).await.unwrap().unwrap();
    assert_eq!(found.size, 5);
    assert_eq!(store.stat(&glob("in/missing.csv")).await.unwrap(), None);
    // A prefix is not an object.
    assert_eq!(store.stat(&glob("in/")).await.unwrap(), None);
}

#[tokio::test]
async fn reads_are_ranged_or_streamed_and_a_missing_object_is_named() {
    let s3 = S3Store::from_env();
    let (store, dir) = prefix(&s3);
    // Larger than one response chunk, so the stream hands over many.
    let body: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let object = put(&store, &dir, "big.bin", body.clone()).await;
    let middle = store.read(&object, 1_000..1_010).await.unwrap();
    assert_eq!(&middle[..], &body[1_000..1_010]);

    let (reading, url) = (store.clone(), object.clone());
    let streamed = tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        blocking::ObjectRead::open(&reading, &url, 0)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        let mut tail = Vec::new();
        blocking::ObjectRead::open(&reading, &url, 2_999_990)
            .unwrap()
            .read_to_end(&mut tail)
            .unwrap();
        (out, tail)
    })
    .await
    .unwrap();
    assert!(streamed.0 == body, "the streamed object differs");
    assert_eq!(streamed.1, &body[2_999_990..]);

    let missing = dir.with_key(format!("{}nope.csv", dir.key()));
    let err = store.read(&missing, 0..1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(
        err.to_string().contains(&format!("{missing}: no such object")),
        "{err}"
    );
}

#[tokio::test]
async fn a_wrong_secret_is_refused_naming_the_object_and_never_the_secret() {
    let s3 = S3Store::from_env();
    let (store, dir) = prefix(&s3);
    let object = put(&store, &dir, "a.csv", b"id\n1\n".to_vec()).await;
    let secret = "wrong-secret-0123456789";
    let wrong = settings(&s3).with("s3.secret-access-key", secret);
    let refused = ObjectStore::open(&object, &wrong, "source.storage").unwrap();
    let err = refused.read(&object, 0..2).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains(&object.to_string()) && shown.contains("access denied"),
        "{shown}"
    );
    assert!(!shown.contains(secret), "{shown}");
    assert!(!format!("{wrong:?}").contains(secret));
}

#[tokio::test]
async fn parquet_is_read_by_footer_and_row_groups() {
    let s3 = S3Store::from_env();
    let (store, dir) = prefix(&s3);
    let ids: Vec<i64> = (0..10_000).collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
        (
            "name",
            Arc::new(StringArray::from_iter_values(ids.iter().map(|i| format!("n{i}")))) as ArrayRef,
        ),
    ])
    .unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(3_000))
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let size = bytes.len() as u64;
    let object = put(&store, &dir, "t.parquet", bytes).await;

    let file = ObjectParquet::new(store.clone(), object.clone(), size);
    let builder = ParquetRecordBatchStreamBuilder::new(file).await.unwrap();
    assert_eq!(builder.metadata().num_row_groups(), 4);
    let mut stream = builder.with_batch_size(1_000).build().unwrap();
    let mut read = Vec::new();
    while let Some(batch) = stream.next().await {
        let batch = batch.unwrap();
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        read.extend(column.values().iter().copied());
    }
    assert_eq!(read, ids);

    // A size that is not the object's is a clear error, not a panic.
    let wrong = ObjectParquet::new(store, object, size + 10);
    let Err(err) = ParquetRecordBatchStreamBuilder::new(wrong).await else {
        panic!("a wrong size read a footer");
    };
    assert!(!err.to_string().is_empty());
}
