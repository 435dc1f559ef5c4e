//! Grouping entries into MutateRows requests under the configured entry and byte limits
//! and Bigtable's own limit of 100,000 mutations per request. Pure: no I/O.

use outflow_core::{Error, Result};
use serde::{Deserialize, Serialize};

/// The service's limits that Outflow enforces before sending, so that a row over a limit
/// is rejected on its own with its row named, rather than failing a whole request (the
/// emulator enforces almost none of them and would accept what the service refuses).
pub(crate) mod limits {
    /// Mutations in one MutateRows request, over all its entries.
    pub(crate) const MAX_MUTATIONS_PER_REQUEST: usize = 100_000;
    /// A row key.
    pub(crate) const MAX_ROW_KEY_BYTES: usize = 4 * 1024;
    /// A column qualifier.
    pub(crate) const MAX_QUALIFIER_BYTES: usize = 16 * 1024;
    /// One cell's value.
    pub(crate) const MAX_CELL_BYTES: usize = 100 * 1024 * 1024;
    /// One gRPC request.
    pub(crate) const MAX_REQUEST_BYTES: usize = 256 * 1024 * 1024;
    /// One entry, leaving room in its request for the table name and framing.
    pub(crate) const MAX_ENTRY_BYTES: usize = MAX_REQUEST_BYTES - 64 * 1024;
}

/// How many entries, and how many bytes of them, go in one MutateRows request, and how
/// many requests may be in flight at once.
///
/// A request also never holds more than 100,000 mutations (Bigtable's limit). A row larger
/// than `max_bytes` on its own is sent alone. Serde form:
/// `{max_entries: 1000, max_bytes: 16777216, max_outstanding_requests: 4}`, each optional.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Batching {
    max_entries: usize,
    max_bytes: usize,
    max_outstanding_requests: usize,
}

impl Default for Batching {
    /// 1,000 entries a request: on Google's emulator as fast as 10,000 (the server's CPU
    /// sets the pace either way) with a third of the writer's memory (docs/benchmarks.md).
    fn default() -> Self {
        Batching {
            max_entries: 1_000,
            max_bytes: 16 * 1024 * 1024,
            max_outstanding_requests: 4,
        }
    }
}

impl Batching {
    /// The defaults: 1,000 entries or 16 MiB per request, 4 requests in flight.
    pub fn new() -> Self {
        Batching::default()
    }

    /// The same, with at most `n` entries (rows) per request (1 to 100,000).
    pub fn with_max_entries(mut self, n: usize) -> Self {
        self.max_entries = n;
        self
    }

    /// The same, with at most `n` bytes of entries per request (up to 256 MiB).
    pub fn with_max_bytes(mut self, n: usize) -> Self {
        self.max_bytes = n;
        self
    }

    /// The same, with at most `n` requests in flight; writing waits for one to finish.
    pub fn with_max_outstanding_requests(mut self, n: usize) -> Self {
        self.max_outstanding_requests = n;
        self
    }

    /// Entries per request.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Bytes per request.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Requests in flight.
    pub fn max_outstanding_requests(&self) -> usize {
        self.max_outstanding_requests
    }

    /// Checks the limits, naming the field.
    pub fn validate(&self) -> Result<()> {
        if !(1..=limits::MAX_MUTATIONS_PER_REQUEST).contains(&self.max_entries) {
            return Err(Error::invalid_config(
                "batching.max_entries",
                format!(
                    "{} is not between 1 and {}",
                    self.max_entries,
                    limits::MAX_MUTATIONS_PER_REQUEST
                ),
            ));
        }
        if !(1..=limits::MAX_ENTRY_BYTES).contains(&self.max_bytes) {
            return Err(Error::invalid_config(
                "batching.max_bytes",
                format!(
                    "{} is not between 1 and {} (Bigtable's request limit, less framing)",
                    self.max_bytes,
                    limits::MAX_ENTRY_BYTES
                ),
            ));
        }
        if self.max_outstanding_requests == 0 {
            return Err(Error::invalid_config(
                "batching.max_outstanding_requests",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Collects items (entries with their size and mutation count) into requests.
#[derive(Debug)]
pub(crate) struct Batcher<T> {
    max_entries: usize,
    max_bytes: usize,
    items: Vec<T>,
    bytes: usize,
    mutations: usize,
}

impl<T> Batcher<T> {
    pub(crate) fn new(batching: &Batching) -> Self {
        Batcher {
            max_entries: batching.max_entries,
            max_bytes: batching.max_bytes,
            items: Vec::new(),
            bytes: 0,
            mutations: 0,
        }
    }

    /// Adds an item of `bytes` bytes and `mutations` mutations. When it does not fit in the
    /// current request, the current request is returned full and the item starts the next.
    /// Items are never over the per-request mutation limit (rows are checked when encoded).
    pub(crate) fn push(&mut self, item: T, bytes: usize, mutations: usize) -> Option<Vec<T>> {
        debug_assert!(mutations <= limits::MAX_MUTATIONS_PER_REQUEST);
        let full = !self.items.is_empty()
            && (self.items.len() + 1 > self.max_entries
                || self.bytes + bytes > self.max_bytes
                || self.mutations + mutations > limits::MAX_MUTATIONS_PER_REQUEST);
        let done = if full { self.take() } else { None };
        self.items.push(item);
        self.bytes += bytes;
        self.mutations += mutations;
        done
    }

    /// The current request, if it holds anything.
    pub(crate) fn take(&mut self) -> Option<Vec<T>> {
        if self.items.is_empty() {
            return None;
        }
        self.bytes = 0;
        self.mutations = 0;
        Some(std::mem::take(&mut self.items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batcher(entries: usize, bytes: usize) -> Batcher<usize> {
        Batcher::new(&Batching::new().with_max_entries(entries).with_max_bytes(bytes))
    }

    /// Pushes items of (bytes, mutations) and returns the requests as lists of item numbers.
    fn split(b: &mut Batcher<usize>, items: &[(usize, usize)]) -> Vec<Vec<usize>> {
        let mut out: Vec<Vec<usize>> = items
            .iter()
            .enumerate()
            .filter_map(|(i, (bytes, mutations))| b.push(i, *bytes, *mutations))
            .collect();
        out.extend(b.take());
        out
    }

    #[test]
    fn defaults() {
        let b = Batching::default();
        assert_eq!(
            (b.max_entries(), b.max_bytes(), b.max_outstanding_requests()),
            (1_000, 16 << 20, 4)
        );
        assert!(b.validate().is_ok());
    }

    #[test]
    fn setters_and_validation_name_the_field() {
        let b = Batching::new()
            .with_max_entries(5)
            .with_max_bytes(100)
            .with_max_outstanding_requests(2);
        assert_eq!(
            (b.max_entries(), b.max_bytes(), b.max_outstanding_requests()),
            (5, 100, 2)
        );
        for (bad, field) in [
            (Batching::new().with_max_entries(0), "batching.max_entries"),
            (Batching::new().with_max_entries(100_001), "batching.max_entries"),
            (Batching::new().with_max_bytes(0), "batching.max_bytes"),
            (Batching::new().with_max_bytes(300 << 20), "batching.max_bytes"),
            (
                Batching::new().with_max_outstanding_requests(0),
                "batching.max_outstanding_requests",
            ),
        ] {
            assert_eq!(bad.validate().unwrap_err().context_value("field"), Some(field));
        }
        let partial: Batching = serde_json::from_str(r#"{"max_entries": 7}"#).unwrap();
        assert_eq!(partial, Batching::new().with_max_entries(7));
    }

    #[test]
    fn splits_on_entry_count() {
        let mut b = batcher(2, 1 << 20);
        assert_eq!(split(&mut b, &[(1, 1); 5]), vec![vec![0, 1], vec![2, 3], vec![4]]);
        assert!(b.take().is_none());
    }

    #[test]
    fn splits_on_bytes_and_sends_an_oversize_row_alone() {
        let mut b = batcher(100, 10);
        assert_eq!(
            split(&mut b, &[(4, 1), (4, 1), (4, 1), (25, 1), (1, 1)]),
            vec![vec![0, 1], vec![2], vec![3], vec![4]]
        );
    }

    #[test]
    fn never_more_than_100k_mutations_per_request() {
        let mut b = batcher(100_000, 1 << 30);
        // 1000 entries of 100 mutations fill a request exactly; the next one starts another.
        let items = vec![(10, 100); 1001];
        let requests = split(&mut b, &items);
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].len(), 1000);
        assert_eq!(requests[1], vec![1000]);
        let mut b = batcher(100_000, 1 << 30);
        let requests = split(&mut b, &[(1, 60_000), (1, 40_000), (1, 1)]);
        assert_eq!(requests, vec![vec![0, 1], vec![2]]);
    }
}
