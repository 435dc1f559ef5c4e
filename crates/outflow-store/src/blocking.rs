//! Store calls from synchronous code.
//!
//! The job source reads on a plain thread (CSV and NDJSON parsers take `std::io::Read`), and
//! it is opened from async code too. Each call here runs on a small runtime of this
//! crate's own and the calling thread waits for it: that works from any thread, inside a
//! Tokio runtime or not, without tying up the caller's runtime to drive the I/O.

use std::future::Future;
use std::io::Read;
use std::sync::OnceLock;

use bytes::{Buf, Bytes};
use futures::{Stream, StreamExt};
use outflow_core::{Error, Result};

use crate::location::ObjectUrl;
use crate::store::ObjectStore;

/// Threads of the I/O runtime: store calls are mostly waiting.
const IO_THREADS: usize = 2;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(IO_THREADS)
            .thread_name("outflow-store-io")
            .enable_all()
            .build()
            .expect("the object store's I/O runtime starts")
    })
}

/// Runs `future` on the I/O runtime and waits for its output on the calling thread.
pub fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task = runtime().spawn(future);
    match futures::executor::block_on(task) {
        Ok(output) => output,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("an object store call was cancelled: {e}"),
    }
}

/// An object read to its end as `std::io::Read`, one request streamed: memory holds
/// one chunk of the response at a time, whatever the object's size.
pub struct ObjectRead {
    stream: Option<Box<dyn Stream<Item = Result<Bytes>> + Send + Unpin>>,
    chunk: Bytes,
    url: ObjectUrl,
}

impl std::fmt::Debug for ObjectRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRead")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ObjectRead {
    /// Opens `url` in `store` for reading from byte `start`.
    pub fn open(store: &ObjectStore, url: &ObjectUrl, start: u64) -> Result<ObjectRead> {
        let (store, target) = (store.clone(), url.clone());
        let stream = block_on(async move { store.stream_from(&target, start).await })?;
        Ok(ObjectRead {
            stream: Some(Box::new(stream)),
            chunk: Bytes::new(),
            url: url.clone(),
        })
    }
}

impl Read for ObjectRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while !self.chunk.has_remaining() {
            let Some(mut stream) = self.stream.take() else {
                return Ok(0);
            };
            let (stream, next) = block_on(async move {
                let next = stream.next().await;
                (stream, next)
            });
            match next {
                None => return Ok(0),
                Some(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.stream = Some(stream);
                }
                Some(Err(e)) => return Err(std::io::Error::other(e.to_string())),
            }
        }
        let n = buf.len().min(self.chunk.remaining());
        self.chunk.copy_to_slice(&mut buf[..n]);
        Ok(n)
    }
}

/// [`ObjectStore::stat`], waited for.
pub fn stat(store: &ObjectStore, url: &ObjectUrl) -> Result<Option<crate::ObjectEntry>> {
    let (store, url) = (store.clone(), url.clone());
    block_on(async move { store.stat(&url).await })
}

/// [`ObjectStore::list`], waited for.
pub fn list(store: &ObjectStore, prefix: &ObjectUrl) -> Result<Vec<crate::ObjectEntry>> {
    let (store, prefix) = (store.clone(), prefix.clone());
    block_on(async move { store.list(&prefix).await })
}

/// [`ObjectStore::glob`], waited for.
pub fn glob(store: &ObjectStore, pattern: &ObjectUrl, what: &str) -> Result<Vec<crate::ObjectEntry>> {
    let (store, pattern, what) = (store.clone(), pattern.clone(), what.to_string());
    block_on(async move { store.glob(&pattern, &what).await })
}

/// An error reading `url` at a point the caller knows better, as `InvalidInput` naming it.
pub fn read_error(url: &ObjectUrl, e: impl std::fmt::Display) -> Error {
    Error::invalid_input(format!("cannot read {url}: {e}")).with_context("file", url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_on_works_outside_and_inside_a_runtime() {
        assert_eq!(block_on(async { 1 + 1 }), 2);
        let outer = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = outer.block_on(async {
            block_on(async {
                tokio::task::yield_now().await;
                3
            })
        });
        assert_eq!(got, 3);
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn a_panic_in_the_call_reaches_the_caller() {
        block_on(async { panic!("boom") })
    }
}
