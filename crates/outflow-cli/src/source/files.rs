//! Which files a `source.path` names, in which order, and in which format.
//!
//! Order matters because row order and dead-letter indexes follow it, so it is always the
//! sorted path order, whatever the file system or the store returns. A path is a local
//! path or an object URL (`s3://bucket/key`); both name a file, a directory (for objects:
//! a prefix) or a glob, with the same rules.

use std::io::Read;
use std::path::{Path, PathBuf};

use outflow_core::{Error, LoadedFile, Result};
use outflow_store::{ObjectEntry, ObjectStore, ObjectUrl, StorageSettings, blocking, is_hidden_name};

use crate::job::Format;

/// Where an input file is.
#[derive(Clone, Debug)]
pub enum Location {
    /// A local file: the job's directory joined with what the job wrote.
    Local(PathBuf),
    /// An object, and the store it is read from.
    Object(ObjectUrl, ObjectStore),
}

impl PartialEq for Location {
    fn eq(&self, other: &Location) -> bool {
        match (self, other) {
            (Location::Local(a), Location::Local(b)) => a == b,
            (Location::Object(a, _), Location::Object(b, _)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Location {}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(path) => path.display().fmt(f),
            Location::Object(url, _) => url.fmt(f),
        }
    }
}

/// One input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Where the file is.
    pub location: Location,
    /// Its size in bytes when the source was opened.
    pub size: u64,
    /// Its modification time then, in milliseconds since the Unix epoch (0 where the file
    /// system keeps none).
    pub modified_ms: i64,
}

/// A file's bytes, read in order.
pub type Input = Box<dyn Read + Send>;

impl SourceFile {
    /// The path or URL, for messages.
    pub fn display(&self) -> &Location {
        &self.location
    }

    /// The local path, for a local file.
    pub fn local_path(&self) -> Option<&Path> {
        match &self.location {
            Location::Local(path) => Some(path),
            Location::Object(..) => None,
        }
    }

    /// The file as a load ledger knows it: a local file by its absolute path (symbolic
    /// links resolved, so the same file is the same wherever the job runs from), an object
    /// by its URL; with its size and modification time.
    pub fn loaded_file(&self) -> LoadedFile {
        let path = match &self.location {
            Location::Local(path) => std::fs::canonicalize(path)
                .unwrap_or_else(|_| path.clone())
                .display()
                .to_string(),
            Location::Object(url, _) => url.to_string(),
        };
        LoadedFile {
            path,
            size: self.size,
            modified_ms: self.modified_ms,
        }
    }

    /// The file's bytes from `offset` on: a local file read directly, an object streamed
    /// by one request.
    pub fn open_at(&self, offset: u64) -> Result<Input> {
        match &self.location {
            Location::Local(path) => {
                use std::io::{Seek, SeekFrom};
                let mut file = std::fs::File::open(path).map_err(|e| super::read_error(self, e))?;
                if offset > 0 {
                    file.seek(SeekFrom::Start(offset))
                        .map_err(|e| super::read_error(self, e))?;
                }
                Ok(Box::new(file))
            }
            Location::Object(url, store) => Ok(Box::new(blocking::ObjectRead::open(store, url, offset)?)),
        }
    }

    /// The file's bytes from the start.
    pub fn open(&self) -> Result<Input> {
        self.open_at(0)
    }
}

const KEY: &str = "source.path";

/// Resolves `path` (relative to `base`) to its files and their format.
///
/// A path that exists is a file or a directory; anything else with glob characters
/// (`*`, `?`, `[`) is a glob. A missing path, a directory or glob without matching files,
/// and files whose format cannot be told from their extensions are configuration errors
/// naming the path.
pub fn resolve(
    path: &str,
    base: &Path,
    format: Option<Format>,
    storage: &StorageSettings,
) -> Result<(Vec<SourceFile>, Format)> {
    if path.trim().is_empty() {
        return Err(Error::invalid_config(KEY, "is blank"));
    }
    if outflow_store::is_object_url(path) {
        return resolve_objects(path, format, storage);
    }
    if !storage.is_empty() {
        return Err(Error::invalid_config(
            "source.storage",
            format!("is for object URLs, but source.path {path:?} is a local path"),
        ));
    }
    let full = if Path::new(path).is_absolute() || base == Path::new(".") {
        PathBuf::from(path)
    } else {
        base.join(path)
    };
    let (paths, from_directory) = if full.is_file() {
        (vec![full.clone()], false)
    } else if full.is_dir() {
        (list_directory(&full)?, true)
    } else if path.contains(['*', '?', '[']) {
        (expand_glob(path, base)?, false)
    } else {
        return Err(
            Error::invalid_config(KEY, format!("{} does not exist", full.display()))
                .with_context("file", full.display().to_string()),
        );
    };

    let format = match format {
        Some(format) => format,
        None => infer_format(full.display(), &paths, from_directory)?,
    };
    let paths: Vec<PathBuf> = if from_directory {
        // A directory holds every file of the format, and nothing else.
        paths
            .into_iter()
            .filter(|p| extension_format(p) == Some(format))
            .collect()
    } else {
        paths
    };
    if paths.is_empty() {
        return Err(Error::invalid_config(
            KEY,
            format!("directory {} holds no {format} files", full.display()),
        )
        .with_context("file", full.display().to_string()));
    }
    let files = paths
        .into_iter()
        .map(|path| {
            let metadata = std::fs::metadata(&path).map_err(|e| {
                Error::invalid_input(format!("cannot read {}: {e}", path.display()))
                    .with_context("file", path.display().to_string())
            })?;
            let modified_ms = metadata
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            Ok(SourceFile {
                location: Location::Local(path),
                size: metadata.len(),
                modified_ms,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((files, format))
}

/// [`resolve`] for an object URL: an object, a prefix (a "directory": every object of the
/// format under it, at any depth) or a glob over keys.
fn resolve_objects(
    path: &str,
    format: Option<Format>,
    storage: &StorageSettings,
) -> Result<(Vec<SourceFile>, Format)> {
    let url = ObjectUrl::parse(path, KEY)?;
    let store = ObjectStore::open(&url, storage, "source.storage")?;
    let (entries, from_prefix) = if url.is_glob() {
        let found = blocking::glob(&store, &url, KEY)?;
        if found.is_empty() {
            return Err(
                Error::invalid_config(KEY, format!("no object matches {url}")).with_context("path", path)
            );
        }
        (found, false)
    } else if let Some(object) = blocking::stat(&store, &url)? {
        (vec![object], false)
    } else {
        let found: Vec<ObjectEntry> = blocking::list(&store, &url)?
            .into_iter()
            .filter(|e| !is_hidden_name(e.url.name()))
            .collect();
        if found.is_empty() {
            return Err(
                Error::invalid_config(KEY, format!("{url} does not exist")).with_context("file", path)
            );
        }
        (found, true)
    };
    let urls: Vec<PathBuf> = entries.iter().map(|e| PathBuf::from(e.url.to_string())).collect();
    let format = match format {
        Some(format) => format,
        None => infer_format(path, &urls, from_prefix)?,
    };
    let files: Vec<SourceFile> = entries
        .into_iter()
        .filter(|e| !from_prefix || extension_format(Path::new(e.url.key())) == Some(format))
        .map(|e| SourceFile {
            location: Location::Object(e.url, store.clone()),
            size: e.size,
            modified_ms: e.modified_ms,
        })
        .collect();
    if files.is_empty() {
        return Err(
            Error::invalid_config(KEY, format!("prefix {url} holds no {format} objects"))
                .with_context("file", path),
        );
    }
    Ok((files, format))
}

fn list_directory(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Error::invalid_input(format!("cannot list directory {}: {e}", dir.display()))
            .with_context("file", dir.display().to_string())
    })?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| {
            Error::invalid_input(format!("cannot list directory {}: {e}", dir.display()))
                .with_context("file", dir.display().to_string())
        })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if is_hidden_name(&name) {
            continue;
        }
        let path = entry.path();
        if path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

fn expand_glob(pattern: &str, base: &Path) -> Result<Vec<PathBuf>> {
    let full = if Path::new(pattern).is_absolute() || base == Path::new(".") {
        pattern.to_string()
    } else {
        // The job's directory is literal text, whatever characters it holds.
        let base = glob::Pattern::escape(&base.to_string_lossy());
        format!("{base}/{pattern}")
    };
    let matches = glob::glob(&full).map_err(|e| {
        Error::invalid_config(KEY, format!("{pattern:?} is not a valid glob: {e}"))
            .with_context("path", pattern)
    })?;
    let mut paths = Vec::new();
    for entry in matches {
        let path = entry.map_err(|e| {
            Error::invalid_input(format!("cannot read {}: {}", e.path().display(), e.error()))
                .with_context("file", e.path().display().to_string())
        })?;
        if path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Err(
            Error::invalid_config(KEY, format!("no file matches {full}")).with_context("path", pattern)
        );
    }
    paths.sort();
    Ok(paths)
}

fn extension_format(path: &Path) -> Option<Format> {
    path.extension()
        .and_then(|e| e.to_str())
        .and_then(Format::from_extension)
}

fn infer_format(full: impl std::fmt::Display, paths: &[PathBuf], is_directory: bool) -> Result<Format> {
    let unknown = |path: &dyn std::fmt::Display| {
        Error::invalid_config(
            "source.format",
            format!(
                "cannot tell the format of {path} from its extension; set source.format to parquet, csv or ndjson"
            ),
        )
    };
    // A directory's other files are skipped; a file or glob match is read, so it must tell.
    if !is_directory && let Some(path) = paths.iter().find(|p| extension_format(p).is_none()) {
        return Err(unknown(&path.display()));
    }
    let mut formats: Vec<Format> = paths.iter().filter_map(|p| extension_format(p)).collect();
    formats.sort_by_key(|f| f.as_str());
    formats.dedup();
    match formats.as_slice() {
        [one] => Ok(*one),
        [] => Err(unknown(&full)),
        _ => Err(Error::invalid_config(
            "source.format",
            format!(
                "{} holds files of several formats ({}); set source.format",
                full,
                formats.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, names: &[&str]) {
        for name in names {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "a\n1\n").unwrap();
        }
    }

    fn none() -> StorageSettings {
        StorageSettings::new()
    }

    #[test]
    fn storage_settings_are_for_object_urls_only() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), &["a.csv"]);
        let settings = StorageSettings::new().with("s3.region", "eu-west-1");
        let err = resolve("a.csv", dir.path(), None, &settings).unwrap_err();
        assert!(
            err.to_string().contains("source.storage: is for object URLs"),
            "{err}"
        );
    }

    fn names(files: &[SourceFile], base: &Path) -> Vec<String> {
        files
            .iter()
            .map(|f| {
                f.local_path()
                    .unwrap()
                    .strip_prefix(base)
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn a_directory_lists_its_files_of_the_format_sorted() {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &[
                "in/b.csv",
                "in/a.csv",
                "in/c.parquet",
                "in/_SUCCESS",
                "in/.a.csv.crc",
                "in/10.csv",
            ],
        );
        let (files, format) = resolve("in", dir.path(), Some(Format::Csv), &none()).unwrap();
        assert_eq!(format, Format::Csv);
        assert_eq!(names(&files, dir.path()), ["in/10.csv", "in/a.csv", "in/b.csv"]);
        assert_eq!(files[0].size, 4);
        // Without a format, a directory's files must agree on one.
        let err = resolve("in", dir.path(), None, &none()).unwrap_err();
        assert!(
            err.to_string().contains("several formats (csv, parquet)"),
            "{err}"
        );
    }

    #[test]
    fn a_glob_matches_sorted_and_gives_the_format() {
        let dir = tempfile::tempdir().unwrap();
        touch(
            dir.path(),
            &["d/2024/b.csv", "d/2023/z.csv", "d/2024/a.csv", "d/x.txt"],
        );
        let (files, format) = resolve("d/**/*.csv", dir.path(), None, &none()).unwrap();
        assert_eq!(format, Format::Csv);
        assert_eq!(
            names(&files, dir.path()),
            ["d/2023/z.csv", "d/2024/a.csv", "d/2024/b.csv"]
        );
        let err = resolve("d/*.parquet", dir.path(), None, &none()).unwrap_err();
        assert!(err.to_string().contains("no file matches"), "{err}");
        assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidConfig);
    }

    #[test]
    fn a_missing_path_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve("nope.csv", dir.path(), None, &none()).unwrap_err();
        assert_eq!(err.kind(), outflow_core::ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("nope.csv does not exist"), "{err}");
    }

    #[test]
    fn an_unknown_extension_needs_a_format() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), &["data.txt"]);
        let err = resolve("data.txt", dir.path(), None, &none()).unwrap_err();
        assert!(err.to_string().contains("set source.format"), "{err}");
        let (_, format) = resolve("data.txt", dir.path(), Some(Format::Csv), &none()).unwrap();
        assert_eq!(format, Format::Csv);
    }
}
