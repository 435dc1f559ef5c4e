//! A Parquet file in a store, for parquet's async reader.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

use crate::location::ObjectUrl;
use crate::store::ObjectStore;

/// Bytes read from the end of the file first: enough for the whole footer of most files,
/// so the footer takes one request.
const FOOTER_HINT: usize = 64 * 1024;

/// A Parquet object of known size: the footer comes from a read of the file's tail, the
/// column chunks from ranged reads of what each row group's read needs.
#[derive(Clone, Debug)]
pub struct ObjectParquet {
    store: ObjectStore,
    url: ObjectUrl,
    size: u64,
    metadata: Option<Arc<ParquetMetaData>>,
}

impl ObjectParquet {
    /// The object at `url` in `store`, `size` bytes long (from a listing or a stat).
    pub fn new(store: ObjectStore, url: ObjectUrl, size: u64) -> ObjectParquet {
        ObjectParquet {
            store,
            url,
            size,
            metadata: None,
        }
    }

    /// Reuses a footer already read (the source reads each footer once, when it settles
    /// the schema).
    pub fn with_metadata(mut self, metadata: Arc<ParquetMetaData>) -> ObjectParquet {
        self.metadata = Some(metadata);
        self
    }

    /// The file's URL.
    pub fn url(&self) -> &ObjectUrl {
        &self.url
    }
}

impl AsyncFileReader for ObjectParquet {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            self.store
                .read(&self.url, range)
                .await
                .map_err(|e| ParquetError::External(Box::new(e)))
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            if let Some(metadata) = &self.metadata {
                return Ok(metadata.clone());
            }
            let size = self.size;
            let reader = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_HINT))
                .with_metadata_options(options.map(|o| o.metadata_options().clone()));
            let metadata = Arc::new(reader.load_and_finish(&mut *self, size).await?);
            self.metadata = Some(metadata.clone());
            Ok(metadata)
        }
        .boxed()
    }
}
