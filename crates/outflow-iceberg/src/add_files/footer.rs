//! Reading Parquet footers, and only footers, many at a time.
//!
//! A footer is the last bytes of a file: the Thrift-encoded metadata, its length and the
//! `PAR1` magic. AddFiles reads the file's tail once (64 KiB, which holds the whole footer of
//! most files) and a second time only when the footer is longer. Local files are read with
//! plain file I/O on tokio's blocking pool, where decoding also runs, so that footers decode
//! in parallel; objects (`s3://`) are read with ranged reads, their sizes known from the
//! listing that found them; other URLs go through the table's FileIO.
//!
//! Every way a file can be wrong (missing, empty, not Parquet, truncated, a footer the
//! Parquet reader rejects or even panics on) ends as a [`FileFailure`] for that file.

use std::io::{Read, Seek, SeekFrom};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use iceberg::io::FileIO;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use super::objects::Objects;
use super::report::FileErrorKind;
use super::schema::{FileSchema, SchemaCache, file_schema};

/// Bytes read from the end of a file in the first read.
const TAIL: u64 = 64 * 1024;
/// The 8 bytes after the metadata: its length and the magic.
const FOOTER_TAIL: u64 = 8;
/// Footers longer than this are refused rather than loaded (real ones are far smaller; a
/// corrupt length field could otherwise ask for gigabytes).
const MAX_METADATA: u64 = 256 * 1024 * 1024;
const MAGIC: &[u8; 4] = b"PAR1";
const MAGIC_ENCRYPTED: &[u8; 4] = b"PARE";

/// Why one file could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileFailure {
    pub kind: FileErrorKind,
    pub message: String,
}

impl FileFailure {
    fn new(kind: FileErrorKind, message: impl Into<String>) -> Self {
        FileFailure {
            kind,
            message: message.into(),
        }
    }
}

/// What AddFiles needs from one file's footer.
#[derive(Debug)]
pub(crate) struct FileFacts {
    /// The file's location, as the table will record it.
    pub location: String,
    /// The file's size in bytes.
    pub size: u64,
    /// Rows in the file.
    pub record_count: u64,
    /// Its schema, null evidence and leaf statistics.
    pub schema: FileSchema,
    /// Where each row group starts, ascending (`None` when the footer's offsets are unusable).
    pub split_offsets: Option<Vec<i64>>,
}

/// Where a file is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    Local(PathBuf),
    Remote(String),
}

fn source(location: &str) -> Result<Source, FileFailure> {
    if location.starts_with("file:") {
        let url = url::Url::parse(location).map_err(|e| {
            FileFailure::new(
                FileErrorKind::Unreadable,
                format!("{location:?} is not a valid URL: {e}"),
            )
        })?;
        let path = url.to_file_path().map_err(|_| {
            FileFailure::new(
                FileErrorKind::Unreadable,
                format!("{location:?} names no local file"),
            )
        })?;
        return Ok(Source::Local(path));
    }
    if super::has_url_scheme(location) {
        return Ok(Source::Remote(location.to_string()));
    }
    Ok(Source::Local(PathBuf::from(location)))
}

/// Local files one blocking task reads one after another. A task for each file cost about
/// as much in scheduling (a thread woken for each) as the statistics of a footer.
const LOCAL_RUN: usize = 8;

/// Reads the footers of `locations`, at most `concurrency` at a time, handing each result
/// to `each` as it comes, in the order of `locations` (so the caller can keep less than
/// every footer's facts at once). `objects` reads object URLs (`s3://`), `io` other URLs;
/// `on_done` is called after each file (for progress reports).
pub(crate) async fn read_each(
    locations: Vec<String>,
    objects: &Objects,
    io: &FileIO,
    concurrency: usize,
    on_done: &(dyn Fn() + Send + Sync),
    mut each: impl FnMut(Result<FileFacts, FileFailure>),
) {
    let schemas = Arc::new(SchemaCache::default());
    let mut results = futures::stream::iter(runs(locations))
        .map(|run| {
            let schemas = schemas.clone();
            async move {
                let results = match run {
                    Run::Local(files) => read_local_run(files, schemas).await,
                    Run::Remote { location, url } => {
                        vec![read_remote_facts(location, &url, objects, io, &schemas).await]
                    }
                    Run::Refused(failure) => vec![Err(failure)],
                };
                results.iter().for_each(|_| on_done());
                results
            }
        })
        .buffered(concurrency.max(1));
    while let Some(results) = results.next().await {
        results.into_iter().for_each(&mut each);
    }
}

/// Files read by one task: up to [`LOCAL_RUN`] local files in a row, or one remote file,
/// or a location that names no file.
enum Run {
    Local(Vec<(String, PathBuf)>),
    Remote { location: String, url: String },
    Refused(FileFailure),
}

/// `locations` in order, local files in runs.
fn runs(locations: Vec<String>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for location in locations {
        match source(&location) {
            Ok(Source::Local(path)) => match out.last_mut() {
                Some(Run::Local(files)) if files.len() < LOCAL_RUN => files.push((location, path)),
                _ => out.push(Run::Local(vec![(location, path)])),
            },
            Ok(Source::Remote(url)) => out.push(Run::Remote { location, url }),
            Err(failure) => out.push(Run::Refused(failure)),
        }
    }
    out
}

/// Reads a run of local files' footers on the blocking pool.
async fn read_local_run(
    files: Vec<(String, PathBuf)>,
    schemas: Arc<SchemaCache>,
) -> Vec<Result<FileFacts, FileFailure>> {
    let n = files.len();
    let read = tokio::task::spawn_blocking(move || {
        files
            .into_iter()
            .map(|(location, path)| {
                let (size, metadata) = read_local(&path)?;
                facts(location, size, &metadata, &schemas)
            })
            .collect::<Vec<_>>()
    });
    read.await.unwrap_or_else(|e| {
        let failure = FileFailure::new(FileErrorKind::Corrupt, format!("reading the footer failed: {e}"));
        (0..n).map(|_| Err(failure.clone())).collect()
    })
}

/// Reads a remote file's footer (at `url`, recorded as `location`) and what AddFiles needs
/// from it: objects (`s3://`, `gs://`) through `objects`, other URLs through `io`.
async fn read_remote_facts(
    location: String,
    url: &str,
    objects: &Objects,
    io: &FileIO,
    schemas: &SchemaCache,
) -> Result<FileFacts, FileFailure> {
    let (size, metadata) = if outflow_store::is_object_url(url) {
        read_object(url, objects).await?
    } else {
        read_remote(url, io).await?
    };
    facts(location, size, &metadata, schemas)
}

/// What AddFiles needs from a decoded footer; its schema converted through `schemas`.
pub(crate) fn facts(
    location: String,
    size: u64,
    metadata: &ParquetMetaData,
    schemas: &SchemaCache,
) -> Result<FileFacts, FileFailure> {
    let num_rows = metadata.file_metadata().num_rows();
    if num_rows < 0 {
        return Err(FileFailure::new(
            FileErrorKind::Corrupt,
            format!("the footer counts {num_rows} rows"),
        ));
    }
    consistent(metadata, size).map_err(|message| FileFailure::new(FileErrorKind::Corrupt, message))?;
    let schema = guarded(|| file_schema(metadata, schemas))
        .map_err(|message| FileFailure::new(FileErrorKind::Corrupt, message))?
        .map_err(|e| FileFailure::new(e.kind, e.message))?;
    Ok(FileFacts {
        location,
        size,
        record_count: num_rows as u64,
        schema,
        split_offsets: split_offsets(metadata, size),
    })
}

/// Checks what the footer says against itself and the file: the row count is the sum of
/// the row groups' (registered as the file's record count, which readers size their reads
/// by), and every column chunk lies inside the file.
fn consistent(metadata: &ParquetMetaData, size: u64) -> Result<(), String> {
    let num_rows = metadata.file_metadata().num_rows();
    let mut in_groups: i64 = 0;
    for (g, group) in metadata.row_groups().iter().enumerate() {
        if group.num_rows() < 0 {
            return Err(format!("row group {g} counts {} rows", group.num_rows()));
        }
        in_groups = in_groups.saturating_add(group.num_rows());
        for column in group.columns() {
            let start = column
                .dictionary_page_offset()
                .unwrap_or_else(|| column.data_page_offset());
            let end = start.checked_add(column.compressed_size());
            if start < 0 || column.compressed_size() < 0 || end.is_none_or(|e| e as u64 > size) {
                return Err(format!(
                    "row group {g}: column {} spans bytes {start} to {} of a {size}-byte file",
                    outflow_core::schema::path_of(column.column_path().parts()),
                    end.map_or_else(|| "overflow".to_string(), |e| e.to_string())
                ));
            }
        }
    }
    if in_groups != num_rows {
        return Err(format!(
            "the footer counts {num_rows} rows but its row groups hold {in_groups}"
        ));
    }
    Ok(())
}

/// Runs `f`, turning a panic into an error message: the Parquet reader has panicked on
/// malformed footers before, and one bad file must not bring down a run.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown failure".into());
        format!("the footer is malformed (the Parquet reader failed: {what})")
    })
}

/// The start of each row group (the first page of its first column), ascending and inside
/// the file; `None` if the footer's offsets say otherwise.
fn split_offsets(metadata: &ParquetMetaData, size: u64) -> Option<Vec<i64>> {
    let mut offsets = Vec::with_capacity(metadata.num_row_groups());
    for group in metadata.row_groups() {
        let start = group
            .columns()
            .iter()
            .map(|c| c.dictionary_page_offset().unwrap_or(c.data_page_offset()))
            .min()?;
        if start < MAGIC.len() as i64 || start as u64 >= size || offsets.last().is_some_and(|l| *l >= start) {
            return None;
        }
        offsets.push(start);
    }
    Some(offsets)
}

fn unreadable(path: &str, e: std::io::Error) -> FileFailure {
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "it does not exist".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        _ => e.to_string(),
    };
    FileFailure::new(FileErrorKind::Unreadable, format!("cannot read {path}: {why}"))
}

/// Reads and decodes a local file's footer.
fn read_local(path: &Path) -> Result<(u64, ParquetMetaData), FileFailure> {
    let shown = path.display().to_string();
    let mut file = std::fs::File::open(path).map_err(|e| unreadable(&shown, e))?;
    let meta = file.metadata().map_err(|e| unreadable(&shown, e))?;
    if meta.is_dir() {
        return Err(FileFailure::new(
            FileErrorKind::Unreadable,
            format!("{shown} is a directory"),
        ));
    }
    let size = meta.len();
    let mut read = |start: u64, len: u64| -> Result<Vec<u8>, FileFailure> {
        let mut buf = vec![0; len as usize];
        file.seek(SeekFrom::Start(start))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(|e| unreadable(&shown, e))?;
        Ok(buf)
    };
    let tail_len = tail_len(size)?;
    let metadata = match inspect_tail(size, &read(size - tail_len, tail_len)?)? {
        Tail::Metadata(m) => m,
        Tail::Longer { start, len } => read(start, len)?,
        Tail::NoMagic => return Err(no_magic(&read(0, MAGIC.len() as u64)?)),
    };
    Ok((size, decode(&metadata)?))
}

/// Reads and decodes a footer through a FileIO.
async fn read_remote(url: &str, io: &FileIO) -> Result<(u64, ParquetMetaData), FileFailure> {
    let failed =
        |e: iceberg::Error| FileFailure::new(FileErrorKind::Unreadable, format!("cannot read {url}: {e}"));
    let input = io.new_input(url).map_err(failed)?;
    let size = input.metadata().await.map_err(failed)?.size;
    let reader = input.reader().await.map_err(failed)?;
    let metadata = read_tail(size, |range| async { reader.read(range).await.map_err(failed) }).await?;
    Ok((size, metadata))
}

/// Reads and decodes the footer of an object: its size from the listing that found it (or
/// a stat), then its tail by a ranged read.
async fn read_object(url: &str, objects: &Objects) -> Result<(u64, ParquetMetaData), FileFailure> {
    let failed = |e: outflow_core::Error| FileFailure::new(FileErrorKind::Unreadable, e.to_string());
    let (store, object) = objects.store(url).map_err(failed)?;
    let size = match objects.size(url) {
        Some(size) => size,
        None => match store.stat(&object).await.map_err(failed)? {
            Some(entry) => entry.size,
            None => {
                return Err(FileFailure::new(
                    FileErrorKind::Unreadable,
                    format!("cannot read {url}: it does not exist"),
                ));
            }
        },
    };
    let metadata = read_tail(size, |range| {
        let (store, object) = (&store, &object);
        async move { store.read(object, range).await.map_err(failed) }
    })
    .await?;
    Ok((size, metadata))
}

/// Decodes the footer of a `size`-byte file whose bytes `read` returns: its tail first,
/// more only when the footer is longer.
async fn read_tail<F, Fut>(size: u64, read: F) -> Result<ParquetMetaData, FileFailure>
where
    F: Fn(std::ops::Range<u64>) -> Fut,
    Fut: std::future::Future<Output = Result<Bytes, FileFailure>>,
{
    let tail_len = tail_len(size)?;
    let tail = read(size - tail_len..size).await?;
    let metadata = match inspect_tail(size, &tail)? {
        Tail::Metadata(m) => m,
        Tail::Longer { start, len } => read(start..start + len).await?.to_vec(),
        Tail::NoMagic => {
            let head = read(0..MAGIC.len() as u64).await?;
            return Err(no_magic(&head));
        }
    };
    decode(&metadata)
}

/// What the last bytes of a file say.
pub(crate) enum Tail {
    /// The whole metadata was in them.
    Metadata(Vec<u8>),
    /// The metadata is longer: read these bytes.
    Longer { start: u64, len: u64 },
    /// There is no Parquet magic at the end.
    NoMagic,
}

/// How many bytes to read from the end of a file of `size` bytes, or why it cannot be Parquet.
pub(crate) fn tail_len(size: u64) -> Result<u64, FileFailure> {
    if size == 0 {
        return Err(FileFailure::new(FileErrorKind::Empty, "the file is empty"));
    }
    // Magic, metadata length, magic: no Parquet file is smaller.
    let smallest = FOOTER_TAIL + MAGIC.len() as u64;
    if size < smallest {
        return Err(FileFailure::new(
            FileErrorKind::NotParquet,
            format!("{size} bytes is too small for a Parquet file"),
        ));
    }
    Ok(size.min(TAIL))
}

/// Reads the footer's length and magic from the last `tail.len()` bytes of a `size`-byte file.
pub(crate) fn inspect_tail(size: u64, tail: &[u8]) -> Result<Tail, FileFailure> {
    let n = tail.len();
    if n < FOOTER_TAIL as usize {
        return Ok(Tail::NoMagic);
    }
    let end = &tail[n - 4..];
    if end == MAGIC_ENCRYPTED {
        return Err(FileFailure::new(
            FileErrorKind::Unsupported,
            "the footer is encrypted (Parquet modular encryption is not supported)",
        ));
    }
    if end != MAGIC {
        return Ok(Tail::NoMagic);
    }
    let len_bytes: [u8; 4] = tail[n - 8..n - 4].try_into().expect("four bytes");
    let metadata_len = u32::from_le_bytes(len_bytes) as u64;
    if metadata_len + FOOTER_TAIL + MAGIC.len() as u64 > size {
        return Err(FileFailure::new(
            FileErrorKind::Corrupt,
            format!(
                "the footer claims {metadata_len} bytes of metadata, more than the {size}-byte file holds; it is truncated or corrupt"
            ),
        ));
    }
    if metadata_len > MAX_METADATA {
        return Err(FileFailure::new(
            FileErrorKind::Unsupported,
            format!(
                "the footer holds {metadata_len} bytes of metadata, more than the {MAX_METADATA} AddFiles reads"
            ),
        ));
    }
    let needed = metadata_len + FOOTER_TAIL;
    if needed <= n as u64 {
        let start = n - needed as usize;
        return Ok(Tail::Metadata(
            tail[start..start + metadata_len as usize].to_vec(),
        ));
    }
    Ok(Tail::Longer {
        start: size - needed,
        len: metadata_len,
    })
}

/// The failure for a file without the magic at its end, told apart by its first bytes.
pub(crate) fn no_magic(head: &[u8]) -> FileFailure {
    if head == MAGIC {
        FileFailure::new(
            FileErrorKind::Corrupt,
            "the file starts like Parquet but has no footer at its end: it is truncated or still being written",
        )
    } else {
        FileFailure::new(
            FileErrorKind::NotParquet,
            "not a Parquet file (no PAR1 magic at its end)",
        )
    }
}

/// Decodes footer metadata.
pub(crate) fn decode(metadata: &[u8]) -> Result<ParquetMetaData, FileFailure> {
    guarded(|| ParquetMetaDataReader::decode_metadata(metadata))
        .map_err(|message| FileFailure::new(FileErrorKind::Corrupt, message))?
        .map_err(|e| {
            FileFailure::new(
                FileErrorKind::Corrupt,
                format!("the footer cannot be decoded: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the local reader finds in `bytes`, without a file.
    fn locate(bytes: &[u8]) -> Result<Vec<u8>, FileFailure> {
        let size = bytes.len() as u64;
        let read = |start: u64, len: u64| bytes[start as usize..(start + len) as usize].to_vec();
        let tail_len = tail_len(size)?;
        match inspect_tail(size, &read(size - tail_len, tail_len))? {
            Tail::Metadata(m) => Ok(m),
            Tail::Longer { start, len } => Ok(read(start, len)),
            Tail::NoMagic => Err(no_magic(&read(0, 4))),
        }
    }

    /// A real two-row-group file's bytes and footer.
    fn two_row_groups() -> (Bytes, ParquetMetaData) {
        use arrow_array::{ArrayRef, Int64Array, RecordBatch};
        use parquet::arrow::ArrowWriter;
        use parquet::file::properties::WriterProperties;

        let batch =
            RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from_iter_values(0..10)) as ArrayRef)])
                .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(5))
            .build();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let bytes = Bytes::from(bytes);
        let metadata = ParquetMetaDataReader::new().parse_and_finish(&bytes).unwrap();
        assert_eq!(metadata.num_row_groups(), 2);
        (bytes, metadata)
    }

    /// A one-column file's footer, the column named `column`, with `rows` rows.
    fn footer_of(column: &str, rows: i64) -> ParquetMetaData {
        use arrow_array::{ArrayRef, Int64Array, RecordBatch};
        use parquet::arrow::ArrowWriter;

        let values = Arc::new(Int64Array::from_iter_values(0..rows)) as ArrayRef;
        let batch = RecordBatch::try_from_iter([(column, values)]).unwrap();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        ParquetMetaDataReader::new()
            .parse_and_finish(&Bytes::from(bytes))
            .unwrap()
    }

    #[test]
    fn files_of_one_schema_share_its_conversion_and_keep_their_own_statistics() {
        let schemas = SchemaCache::default();
        let (a, b, other) = (footer_of("id", 3), footer_of("id", 7), footer_of("key", 3));
        let fa = facts("a".into(), 10_000, &a, &schemas).unwrap();
        let fb = facts("b".into(), 10_000, &b, &schemas).unwrap();
        let fo = facts("o".into(), 10_000, &other, &schemas).unwrap();
        // Decoded separately, equal schemas still convert once.
        assert!(Arc::ptr_eq(&fa.schema.converted, &fb.schema.converted));
        assert!(!Arc::ptr_eq(&fa.schema.converted, &fo.schema.converted));
        assert_eq!(fo.schema.converted.schema.fields[0].name, "key");
        // The statistics are each file's own.
        assert_eq!((fa.record_count, fb.record_count), (3, 7));
        assert_eq!(
            fa.schema.leaves[0].upper,
            Some(super::super::schema::Stat::Int(2))
        );
        assert_eq!(
            fb.schema.leaves[0].upper,
            Some(super::super::schema::Stat::Int(6))
        );
        // A fresh cache converts again, to an equal schema.
        let again = facts("a".into(), 10_000, &a, &SchemaCache::default()).unwrap();
        assert!(!Arc::ptr_eq(&again.schema.converted, &fa.schema.converted));
        assert_eq!(again.schema.converted.schema, fa.schema.converted.schema);
    }

    #[test]
    fn local_files_are_read_in_runs_in_their_order_and_others_alone() {
        // Three local files, an object, eleven local files and one more as a file: URL.
        let mut given: Vec<String> = (0..14).map(|i| format!("/d/{i}.parquet")).collect();
        given.insert(3, "s3://b/x.parquet".into());
        given.push("file:///d/last.parquet".into());
        let runs = runs(given.clone());
        let shape: Vec<usize> = runs
            .iter()
            .map(|r| match r {
                Run::Local(files) => files.len(),
                Run::Remote { .. } | Run::Refused(_) => 0,
            })
            .collect();
        // The object alone; after it, runs of at most LOCAL_RUN.
        assert_eq!(LOCAL_RUN, 8);
        assert_eq!(shape, vec![3, 0, 8, 4]);
        let flattened: Vec<String> = runs
            .into_iter()
            .flat_map(|r| match r {
                Run::Local(files) => files.into_iter().map(|(l, _)| l).collect::<Vec<_>>(),
                Run::Remote { location, .. } => vec![location],
                Run::Refused(failure) => panic!("refused: {}", failure.message),
            })
            .collect();
        assert_eq!(flattened, given);
        // A file: URL that names no local file is refused in its place, as unreadable.
        let refused = super::runs(vec!["file://elsewhere/x.parquet".into()]);
        assert!(
            matches!(&refused[..], [Run::Refused(f)] if f.kind == FileErrorKind::Unreadable),
            "a file: URL on another host is not a local file"
        );
    }

    #[test]
    fn a_footer_whose_row_count_contradicts_its_row_groups_is_corrupt() {
        use parquet::file::metadata::FileMetaData;

        let (bytes, metadata) = two_row_groups();
        let size = bytes.len() as u64;
        assert_eq!(
            facts("f".into(), size, &metadata, &SchemaCache::default())
                .unwrap()
                .record_count,
            10
        );
        let file = metadata.file_metadata();
        let inflated = ParquetMetaData::new(
            FileMetaData::new(
                file.version(),
                4_600_000_000_000_000_000,
                None,
                None,
                file.schema_descr_ptr(),
                None,
            ),
            metadata.row_groups().to_vec(),
        );
        let err = facts("f".into(), size, &inflated, &SchemaCache::default()).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Corrupt);
        assert!(
            err.message
                .contains("4600000000000000000 rows but its row groups hold 10"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_column_chunk_past_the_end_of_the_file_is_corrupt() {
        let (_, metadata) = two_row_groups();
        // A file one byte shorter than where the last column chunk ends.
        let last = &metadata.row_groups()[1].columns()[0];
        let end = last.dictionary_page_offset().unwrap_or(last.data_page_offset()) + last.compressed_size();
        let err = facts("f".into(), end as u64 - 1, &metadata, &SchemaCache::default()).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Corrupt);
        assert!(err.message.contains("column id spans bytes"), "{}", err.message);
    }

    #[test]
    fn classifies_files_that_are_not_whole_parquet() {
        assert_eq!(locate(b"").unwrap_err().kind, FileErrorKind::Empty);
        assert_eq!(locate(b"PAR1").unwrap_err().kind, FileErrorKind::NotParquet);
        assert_eq!(
            locate(b"hello, this is text\n").unwrap_err().kind,
            FileErrorKind::NotParquet
        );
        let truncated = b"PAR1\x15\x00\x15\x1c\x15\x1c,\x15\x04\x15\x00";
        assert_eq!(locate(truncated).unwrap_err().kind, FileErrorKind::Corrupt);
        let long = [&b"PAR1"[..], &[0xff, 0xff, 0, 0], b"PAR1"].concat();
        let err = locate(&long).unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Corrupt);
        assert!(err.message.contains("65535 bytes"), "{}", err.message);
        let encrypted = [&b"PAR1"[..], &[1, 2, 3, 4], &[4, 0, 0, 0], b"PARE"].concat();
        assert_eq!(locate(&encrypted).unwrap_err().kind, FileErrorKind::Unsupported);
    }

    #[test]
    fn finds_footers_longer_than_the_first_read() {
        let metadata = vec![7u8; (TAIL as usize) * 2];
        let file = [
            &b"PAR1"[..],
            &[0u8; 100],
            &metadata,
            &(metadata.len() as u32).to_le_bytes(),
            b"PAR1",
        ]
        .concat();
        assert_eq!(locate(&file).unwrap(), metadata);
    }

    #[test]
    fn garbage_metadata_is_corrupt_not_a_panic() {
        for garbage in [&b""[..], b"\x00", b"\xff\xff\xff\xff", b"\x19\x1c\x1c\x1c\x1c"] {
            assert_eq!(decode(garbage).unwrap_err().kind, FileErrorKind::Corrupt);
        }
    }

    #[test]
    fn locations_are_local_paths_or_urls() {
        assert_eq!(
            source("/a/b.parquet").unwrap(),
            Source::Local("/a/b.parquet".into())
        );
        assert_eq!(
            source("file:///a/b%20c.parquet").unwrap(),
            Source::Local("/a/b c.parquet".into())
        );
        assert_eq!(
            source("s3://bucket/k").unwrap(),
            Source::Remote("s3://bucket/k".into())
        );
    }
}
