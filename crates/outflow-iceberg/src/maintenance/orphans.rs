//! [`remove_orphans`]: deletes the files under a table's location that no snapshot
//! references and that are older than a safety age.
//!
//! Orphans are what failed or killed writers leave (data files of a commit that never
//! happened, manifests of an attempt that lost its race) and what a deletion that failed
//! left behind. A file is referenced when the table's current metadata file or its
//! metadata log names it, or any snapshot reaches it: its manifest list, the manifests it
//! names, and every file those manifests mention, whatever the entry's status (a file a
//! manifest marks deleted is still what time travel to the snapshot before reads).
//!
//! A writer running now has files no snapshot references yet: only files last modified
//! before the safety age (3 days by default, as Iceberg's `DeleteOrphanFiles`) are
//! deleted, so keep it longer than any write takes. Files are listed on the local
//! filesystem, or in the object store (`s3://`) of the table's location, with the storage
//! settings among the catalog's properties; a location of another scheme is refused.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use iceberg::TableIdent;
use outflow_core::{Error, ErrorKind, Result, RetryPolicy};
use outflow_store::{ObjectStore, ObjectUrl};
use serde::Serialize;

use super::manifests_of;
use crate::client::{IcebergCatalog, IcebergResultExt};
use crate::schema::{parse_table_ident, table_name};

/// Iceberg's default safety age for orphan files: 3 days.
pub const DEFAULT_SAFETY_AGE_MS: i64 = 3 * 24 * 3600 * 1000;

/// What [`remove_orphans`] removes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoveOrphansOptions {
    /// Only files last modified before this time (milliseconds since the epoch) go.
    pub older_than_ms: i64,
    /// List the orphans, delete nothing.
    pub dry_run: bool,
}

/// What [`remove_orphans`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RemoveOrphansReport {
    /// The table.
    pub table: String,
    /// Files under the table's location.
    pub files: usize,
    /// The orphans old enough to go, sorted: deleted (in a dry run: to delete), but for
    /// those in `not_deleted`.
    pub orphans: Vec<String>,
    /// Orphans younger than the safety age, left alone (a writer may still commit them).
    pub too_young: usize,
    /// Orphans that could not be deleted, each with why.
    pub not_deleted: Vec<String>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

/// Deletes `table`'s old orphan files; see the module docs.
pub async fn remove_orphans(
    catalog: &IcebergCatalog,
    table: &str,
    options: &RemoveOrphansOptions,
    retry: &RetryPolicy,
) -> Result<RemoveOrphansReport> {
    let ident = parse_table_ident(table)?;
    let what = &format!("finding the orphan files of {}", table_name(&ident));
    let ident = &ident;
    let (mut report, root, orphans) = retry
        .retry_within(what, retry.deadline(), |limit| {
            catalog.attempt_within(what, limit, find_orphans(catalog, ident, options))
        })
        .await?;
    if !options.dry_run {
        for file in &orphans {
            let deleted = match (&root, file) {
                (Root::Local(_), File::Local(path)) => std::fs::remove_file(path).map_err(|e| e.to_string()),
                (Root::Object(store, _), File::Object(url)) => {
                    store.delete(url).await.map_err(|e| e.message().to_string())
                }
                _ => Err("not under the table's location".to_string()),
            };
            if let Err(why) = deleted {
                report.not_deleted.push(format!("{}: {why}", file.shown()));
            }
        }
        tracing::info!(table = %report.table, deleted = orphans.len() - report.not_deleted.len(), "removed orphan files");
    }
    Ok(report)
}

/// Where a table's files are listed.
enum Root {
    Local(PathBuf),
    Object(ObjectStore, ObjectUrl),
}

/// A file found under the table's location.
#[derive(Clone, Debug, PartialEq, Eq)]
enum File {
    Local(PathBuf),
    Object(ObjectUrl),
}

impl File {
    fn shown(&self) -> String {
        match self {
            File::Local(path) => path.display().to_string(),
            File::Object(url) => url.to_string(),
        }
    }
}

/// A location as the referenced set holds it: a local file's normalized path, an object's
/// bucket and key (whatever the spelling of its scheme).
fn reference_key(location: &str) -> Option<String> {
    if let Some(path) = local_path(location) {
        return Some(path.display().to_string());
    }
    if outflow_store::is_object_url(location) {
        let url = ObjectUrl::parse(location, "location").ok()?;
        return Some(format!("{:?}:{}/{}", url.scheme(), url.bucket(), url.key()));
    }
    None
}

fn root_of(catalog: &IcebergCatalog, location: &str, name: &str) -> Result<Root> {
    if let Some(path) = local_path(location) {
        return Ok(Root::Local(path));
    }
    if outflow_store::is_object_url(location) {
        let url = ObjectUrl::parse(location, "location")?;
        let store = ObjectStore::open(&url, catalog.storage_settings(), "catalog.properties")?;
        return Ok(Root::Object(store, url));
    }
    Err(Error::new(
        ErrorKind::Unsupported,
        format!(
            "table {name} is at {location}: remove-orphans lists local files and s3:// or gs:// objects only"
        ),
    )
    .with_context("table", name.to_string()))
}

async fn find_orphans(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    options: &RemoveOrphansOptions,
) -> Result<(RemoveOrphansReport, Root, Vec<File>)> {
    let name = table_name(ident);
    let table = catalog.require_table(ident).await?;
    let metadata = table.metadata();
    let root = root_of(catalog, metadata.location(), &name)?;
    let mut referenced: HashSet<String> = HashSet::new();
    let mut refer = |path: &str| {
        if let Some(key) = reference_key(path) {
            referenced.insert(key);
        }
    };
    if let Some(current) = table.metadata_location() {
        refer(current);
    }
    for entry in metadata.metadata_log() {
        refer(&entry.metadata_file);
    }
    let io = table.file_io();
    let mut read = HashSet::new();
    for snapshot in manifests_of(&table).await? {
        refer(&snapshot.manifest_list);
        for manifest in snapshot.manifests {
            refer(&manifest.manifest_path);
            if !read.insert(manifest.manifest_path.clone()) {
                continue;
            }
            let loaded = manifest
                .load_manifest(io)
                .await
                .doing(format_args!("reading manifest {}", manifest.manifest_path))?;
            for entry in loaded.entries() {
                refer(entry.data_file().file_path());
            }
        }
    }
    let files: Vec<(File, i64)> = match &root {
        Root::Local(dir) => list_files(dir)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("listing the files under {}: {e}", dir.display()),
                )
                .with_context("table", name.clone())
            })?
            .into_iter()
            .map(|(path, ms)| (File::Local(path), ms))
            .collect(),
        Root::Object(store, url) => store
            .list(url)
            .await?
            .into_iter()
            .map(|e| (File::Object(e.url), e.modified_ms))
            .collect(),
    };
    let mut report = RemoveOrphansReport {
        table: name,
        files: files.len(),
        dry_run: options.dry_run,
        ..Default::default()
    };
    let mut orphans = Vec::new();
    for (file, modified_ms) in files {
        if reference_key(&file.shown()).is_some_and(|key| referenced.contains(&key)) {
            continue;
        }
        if modified_ms >= options.older_than_ms {
            report.too_young += 1;
            continue;
        }
        orphans.push(file);
    }
    orphans.sort_by_key(File::shown);
    report.orphans = orphans.iter().map(File::shown).collect();
    Ok((report, root, orphans))
}

/// The local path of a `file:` URL or an absolute path; `None` for other schemes.
fn local_path(location: &str) -> Option<PathBuf> {
    let path = match location.strip_prefix("file://") {
        Some(rest) => rest,
        None if location.starts_with('/') => location,
        None => location.strip_prefix("file:").filter(|p| p.starts_with('/'))?,
    };
    Some(Path::new(path).components().collect())
}

/// Every file under `root` with its modification time in milliseconds (none when `root`
/// does not exist).
fn list_files(root: &Path) -> std::io::Result<Vec<(PathBuf, i64)>> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                let modified = entry.metadata()?.modified()?;
                let ms = modified
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0);
                out.push((entry.path(), ms));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_become_local_paths_and_others_are_refused() {
        assert_eq!(local_path("file:///w/db/t"), Some(PathBuf::from("/w/db/t")));
        assert_eq!(local_path("file:/w/db/t/"), Some(PathBuf::from("/w/db/t")));
        assert_eq!(
            local_path("/w/db//t/data/a.parquet"),
            Some(PathBuf::from("/w/db/t/data/a.parquet"))
        );
        assert_eq!(local_path("s3://bucket/db/t"), None);
        assert_eq!(local_path("relative/t"), None);
    }

    #[test]
    fn references_match_whatever_the_spelling() {
        let key = |l: &str| reference_key(l).unwrap();
        assert_eq!(
            key("s3a://b/db/t/data/a.parquet"),
            key("s3://b/db/t/data/a.parquet")
        );
        assert_ne!(key("s3://b/db/t/a"), key("s3://c/db/t/a"));
        assert_eq!(key("file:///w/db//t/a"), key("/w/db/t/a"));
        assert_ne!(key("gs://b/db/t/a"), key("s3://b/db/t/a"));
        assert_eq!(reference_key("abfss://c@a/t/a"), None);
    }

    #[test]
    fn listing_finds_nested_files_and_a_missing_root_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/day=1")).unwrap();
        std::fs::write(dir.path().join("data/day=1/a.parquet"), b"x").unwrap();
        std::fs::write(dir.path().join("v1.metadata.json"), b"{}").unwrap();
        let mut names: Vec<String> = list_files(dir.path())
            .unwrap()
            .into_iter()
            .map(|(p, ms)| {
                assert!(ms > 0);
                p.strip_prefix(dir.path()).unwrap().display().to_string()
            })
            .collect();
        names.sort();
        assert_eq!(names, ["data/day=1/a.parquet", "v1.metadata.json"]);
        assert!(list_files(&dir.path().join("missing")).unwrap().is_empty());
    }
}
