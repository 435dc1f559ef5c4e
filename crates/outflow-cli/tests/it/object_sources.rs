//! Job sources in the S3 store the test script starts (SeaweedFS, SigV4 keys): CSV by a
//! glob, NDJSON by one URL, Parquet by a prefix, and Parquet through the DataFusion engine,
//! each written to a local Iceberg table that PyIceberg and Java Iceberg read back; errors name the object,
//! and no secret shows, even at trace level.

use std::path::Path;

use outflow_store::{ObjectStore, ObjectUrl, StorageSettings};
use outflow_testkit::iceberg::{GcsStore, Reader, S3Store, TestCatalog, sorted_ids};
use serde_json::Value;

use crate::outflow;

/// A fresh prefix in the test bucket with `objects` (key under it, bytes) written to it.
fn upload(s3: &S3Store, objects: &[(&str, Vec<u8>)]) -> String {
    let root = format!("s3://{}/{}", s3.bucket, outflow_testkit::unique_name("source"));
    let url = ObjectUrl::parse(&root, "test").unwrap();
    let settings: StorageSettings = s3.properties().into_iter().collect();
    let store = ObjectStore::open(&url, &settings, "test").unwrap();
    let writes: Vec<(String, Vec<u8>)> = objects
        .iter()
        .map(|(name, bytes)| (format!("{}/{name}", url.key()), bytes.clone()))
        .collect();
    outflow_store::blocking::block_on(async move {
        for (key, bytes) in writes {
            store.operator().write(&key, bytes).await.unwrap();
        }
    });
    root
}

/// The job's `source.storage` with the keys through `${ENV}`.
const STORAGE: &str = "  storage:\n    s3.endpoint: '${OUTFLOW_S3_ENDPOINT}'\n    s3.region: '${OUTFLOW_S3_REGION}'\n\
    \x20   s3.path-style-access: 'true'\n    s3.access-key-id: '${S3_KEY}'\n    s3.secret-access-key: '${S3_SECRET}'\n";

fn job(dir: &Path, name: &str, path: &str, table: &str, extra: &str) -> std::path::PathBuf {
    let text = format!(
        "source:\n  path: '{path}'\n{STORAGE}{extra}sink:\n  iceberg:\n\
         \x20   catalog: {{ type: sql, uri: lake/catalog.db, warehouse: lake/warehouse }}\n\
         \x20   table: {table}\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn run(s3: &S3Store, job: &Path, secret: &str) -> assert_cmd::assert::Assert {
    outflow()
        .env("OUTFLOW_S3_ENDPOINT", &s3.endpoint)
        .env("OUTFLOW_S3_REGION", &s3.region)
        .env("S3_KEY", &s3.access_key_id)
        .env("S3_SECRET", secret)
        .args(["run", "--json", "--quiet"])
        .arg(job)
        .assert()
}

fn parquet(ids: std::ops::Range<i64>) -> Vec<u8> {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    let batch = RecordBatch::try_from_iter([
        (
            "id",
            Arc::new(Int64Array::from_iter_values(ids.clone())) as ArrayRef,
        ),
        (
            "name",
            Arc::new(StringArray::from_iter_values(ids.map(|i| format!("p{i}")))) as ArrayRef,
        ),
    ])
    .unwrap();
    let mut bytes = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    bytes
}

#[test]
fn jobs_read_csv_ndjson_and_parquet_sources_from_s3() {
    let s3 = S3Store::from_env();
    let root = upload(
        &s3,
        &[
            ("csv/2026-01/a.csv", b"id,name\n1,ada\n2,grace\n".to_vec()),
            ("csv/2026-02/b.csv", b"id,name\n3,edsger\n".to_vec()),
            ("csv/2026-02/skip.txt", b"not matched".to_vec()),
            (
                "json/people.ndjson",
                b"{\"id\": 10, \"name\": \"x\"}\n{\"id\": 11}\n".to_vec(),
            ),
            ("pq/part-0.parquet", parquet(100..150)),
            ("pq/part-1.parquet", parquet(150..175)),
            ("pq/_SUCCESS", Vec::new()),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("lake")).unwrap();
    let secret = s3.secret_access_key.clone();
    let jobs = [
        (
            "csv.yaml",
            format!("{root}/csv/*/*.csv"),
            "db.from_csv",
            "",
            vec![1, 2, 3],
        ),
        (
            "json.yaml",
            format!("{root}/json/people.ndjson"),
            "db.from_json",
            "",
            vec![10, 11],
        ),
        (
            "pq.yaml",
            format!("{root}/pq/"),
            "db.from_parquet",
            "",
            (100..175).collect(),
        ),
        (
            "engine.yaml",
            format!("{root}/pq"),
            "db.from_engine",
            "engine:\n  sql: SELECT id, name FROM source WHERE id % 5 = 0\n",
            (100..175).filter(|i| i % 5 == 0).collect(),
        ),
    ];
    let catalog = TestCatalog::sql_in(&dir.path().join("lake"));
    for (name, path, table, extra, expected) in jobs {
        let job = job(dir.path(), name, &path, table, extra);
        let out = run(&s3, &job, &secret).success();
        let report: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        assert_eq!(
            report["result"]["destinations"][table]["rows"],
            expected.len() as u64,
            "{name}: {report}"
        );
        let read = catalog.read_both(table);
        assert_eq!(sorted_ids(&read), expected, "{name}");
        let shown = format!("{report}{}", String::from_utf8_lossy(&out.get_output().stderr));
        assert!(!shown.contains(&secret), "{shown}");
    }
    // The CSV rows carry their values.
    let read = catalog.read(Reader::PyIceberg, "db.from_csv");
    let names: Vec<&str> = outflow_testkit::iceberg::rows(&read)
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ada", "grace", "edsger"]);
}

#[test]
fn an_object_source_error_names_the_object_and_never_the_secret() {
    let s3 = S3Store::from_env();
    let root = upload(&s3, &[("bad/a.csv", b"id\n1\nnot-a-number\n".to_vec())]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("lake")).unwrap();
    let secret = s3.secret_access_key.clone();

    // A path that names nothing.
    let missing = job(
        dir.path(),
        "missing.yaml",
        &format!("{root}/nothing/"),
        "db.t",
        "",
    );
    let out = run(&s3, &missing, &secret).code(2);
    let shown = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(
        shown.contains(&format!("{root}/nothing/ does not exist")),
        "{shown}"
    );

    // A bad value: the error names the object and the line, and nothing is committed.
    let bad = job(
        dir.path(),
        "bad.yaml",
        &format!("{root}/bad/a.csv"),
        "db.t",
        "  csv:\n    schema:\n      - { name: id, type: long }\n",
    );
    let out = run(&s3, &bad, &secret).failure();
    let shown = String::from_utf8_lossy(&out.get_output().stderr).to_string();
    assert!(shown.contains(&format!("{root}/bad/a.csv, line 3")), "{shown}");

    // A wrong secret, logged at trace level: refused, the object named, the secret nowhere.
    let wrong = "Wr0ng-secret-for-the-trace-test";
    let out = outflow()
        .env("OUTFLOW_S3_ENDPOINT", &s3.endpoint)
        .env("OUTFLOW_S3_REGION", &s3.region)
        .env("S3_KEY", &s3.access_key_id)
        .env("S3_SECRET", wrong)
        .env("OUTFLOW_LOG", "trace")
        .args(["run", "--json"])
        .arg(&bad)
        .assert()
        .failure();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.get_output().stdout),
        String::from_utf8_lossy(&out.get_output().stderr)
    );
    assert!(
        shown.contains("access denied") && shown.contains(&format!("{root}/bad/a.csv")),
        "{shown}"
    );
    assert!(
        !shown.contains(wrong) && !shown.contains(&secret),
        "a secret was shown"
    );
    assert!(
        TestCatalog::sql_in(&dir.path().join("lake"))
            .try_read(Reader::PyIceberg, "db.t")
            .is_none()
    );
}

/// `outflow iceberg add-files` registers objects under a prefix into a table it creates in
/// an S3 warehouse, the store's settings given as catalog properties and the keys taken
/// from the AWS environment variables; a key on the command line is refused.
#[test]
fn add_files_takes_an_s3_prefix_with_keys_from_the_aws_environment() {
    let s3 = S3Store::from_env();
    let root = upload(
        &s3,
        &[
            ("landed/a.parquet", parquet(0..20)),
            ("landed/sub/b.parquet", parquet(20..30)),
            ("landed/_SUCCESS", Vec::new()),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let warehouse = format!("{root}/warehouse");
    let add = |extra: &[&str]| {
        let mut cmd = outflow();
        cmd.current_dir(dir.path())
            .env("AWS_ACCESS_KEY_ID", &s3.access_key_id)
            .env("AWS_SECRET_ACCESS_KEY", &s3.secret_access_key)
            .args([
                "iceberg",
                "add-files",
                "--json",
                "--quiet",
                "--catalog-uri",
                "catalog.db",
            ])
            .args(["--warehouse", &warehouse, "--table", "db.landed"])
            .arg(format!("--catalog-property=s3.endpoint={}", s3.endpoint))
            .arg(format!("--catalog-property=s3.region={}", s3.region))
            .arg("--catalog-property=s3.path-style-access=true")
            .args(extra);
        cmd.assert()
    };
    let out = add(&[&format!("{root}/landed/")]).success();
    let doc: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["files_added"], 2, "{doc}");
    let readers = TestCatalog::SqlInStore {
        name: "outflow".into(),
        db: dir.path().join("catalog.db"),
        warehouse: warehouse.clone(),
        properties: s3.properties(),
    };
    let read = readers.read_both("db.landed");
    assert_eq!(sorted_ids(&read), (0..30).collect::<Vec<_>>());

    let refused = add(&[
        "--catalog-property=s3.secret-access-key=typed-in-the-shell",
        &format!("{root}/landed/"),
    ])
    .code(2);
    let stderr = String::from_utf8_lossy(&refused.get_output().stderr).to_string();
    assert!(
        stderr.contains("s3.secret-access-key is a credential"),
        "{stderr}"
    );
    assert!(!stderr.contains("typed-in-the-shell"), "{stderr}");
}

/// Sources in Google Cloud Storage (fake-gcs-server), into a table whose warehouse is in the
/// same bucket: CSV by a glob over `day=` directories read by the streaming path, Parquet by
/// a prefix through the DataFusion engine; PyIceberg and Java Iceberg read both tables back
/// from the store.
#[test]
fn jobs_read_sources_from_gcs_into_a_gcs_warehouse() {
    let gcs = GcsStore::from_env();
    let prefix = outflow_testkit::unique_name("source");
    let objects: [(&str, Vec<u8>); 5] = [
        ("csv/day=1/a.csv", b"id,name\n1,ada\n2,grace\n".to_vec()),
        ("csv/day=2/b.csv", b"id,name\n3,edsger\n".to_vec()),
        ("pq/part-0.parquet", parquet(100..150)),
        ("pq/part-1.parquet", parquet(150..175)),
        ("pq/_SUCCESS", Vec::new()),
    ];
    for (name, bytes) in &objects {
        gcs.upload(&format!("{prefix}/{name}"), bytes);
    }
    let root = format!("gs://{}/{prefix}", gcs.bucket);
    let dir = tempfile::tempdir().unwrap();
    let storage = "  storage:\n    gcs.service.path: '${OUTFLOW_GCS_ENDPOINT}'\n    gcs.no-auth: 'true'\n";
    let sink = format!(
        "sink:\n  iceberg:\n    catalog:\n      type: sql\n      uri: catalog.db\n      warehouse: '{root}/warehouse'\n\
         \x20     properties: {{ gcs.service.path: '${{OUTFLOW_GCS_ENDPOINT}}', gcs.no-auth: 'true' }}\n"
    );
    let jobs = [
        (
            "csv.yaml",
            format!("{root}/csv/*/*.csv"),
            "db.from_csv",
            "",
            vec![1, 2, 3],
        ),
        (
            "engine.yaml",
            format!("{root}/pq/"),
            "db.from_engine",
            "engine:\n  sql: SELECT id, name FROM source WHERE id % 5 = 0\n",
            (100..175).filter(|i| i % 5 == 0).collect::<Vec<i64>>(),
        ),
    ];
    let catalog = TestCatalog::SqlInStore {
        name: "outflow".into(),
        db: dir.path().join("catalog.db"),
        warehouse: format!("{root}/warehouse"),
        properties: gcs.properties(),
    };
    for (name, path, table, extra, expected) in jobs {
        let text = format!("source:\n  path: '{path}'\n{storage}{extra}{sink}    table: {table}\n");
        std::fs::write(dir.path().join(name), text).unwrap();
        let out = outflow()
            .current_dir(dir.path())
            .env("OUTFLOW_GCS_ENDPOINT", &gcs.endpoint)
            .args(["run", "--json", "--quiet", name])
            .assert()
            .success();
        let report: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
        assert_eq!(
            report["result"]["destinations"][table]["rows"],
            expected.len() as u64,
            "{name}: {report}"
        );
        assert_eq!(sorted_ids(&catalog.read_both(table)), expected, "{name}");
    }
}
