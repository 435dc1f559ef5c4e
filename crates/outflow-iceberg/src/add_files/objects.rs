//! AddFiles' inputs in object stores: prefixes and globs are listed, and the sizes the
//! listings give spare each footer read a stat.
//!
//! An input that is an object URL ending in `/` names every Parquet object under that
//! prefix, at any depth (names ending in `.parquet`, hidden names and `_` markers such as
//! `_SUCCESS` left out); one holding `*`, `?` or `[` is a glob over keys. Either way the
//! objects are registered by the URLs the listing gives, in key order.

use std::collections::HashMap;
use std::sync::Mutex;

use outflow_core::Result;
use outflow_store::{ObjectStore, ObjectUrl, StorageSettings};

const WHAT: &str = "catalog.properties";

/// The stores AddFiles reads objects from, one per bucket, and the sizes listings gave.
#[derive(Debug, Default)]
pub(crate) struct Objects {
    settings: StorageSettings,
    stores: Mutex<HashMap<String, ObjectStore>>,
    sizes: Mutex<HashMap<String, u64>>,
}

impl Objects {
    /// Objects reached with `settings` (the catalog's storage properties).
    pub(crate) fn new(settings: StorageSettings) -> Objects {
        Objects {
            settings,
            ..Objects::default()
        }
    }

    /// The store of `url`'s bucket, and `url` parsed.
    pub(crate) fn store(&self, url: &str) -> Result<(ObjectStore, ObjectUrl)> {
        let object = ObjectUrl::parse(url, "files")?;
        let key = format!("{:?}/{}", object.scheme(), object.bucket());
        let mut stores = self.stores.lock().expect("the store map is not poisoned");
        if let Some(store) = stores.get(&key) {
            return Ok((store.clone(), object));
        }
        let store = ObjectStore::open(&object, &self.settings, WHAT)?;
        stores.insert(key, store.clone());
        Ok((store, object))
    }

    /// The size a listing gave for `url`.
    pub(crate) fn size(&self, url: &str) -> Option<u64> {
        self.sizes
            .lock()
            .expect("the size map is not poisoned")
            .get(url)
            .copied()
    }

    /// The objects `given` names when it is a prefix or a glob, in key order; `None` when
    /// it names one object (or is no object URL at all).
    pub(crate) async fn expand(&self, given: &str) -> Option<Result<Vec<String>>> {
        if !outflow_store::is_object_url(given) {
            return None;
        }
        let is_prefix = given.ends_with('/');
        let (store, url) = match self.store(given) {
            Ok(found) => found,
            Err(e) => return Some(Err(e)),
        };
        if !is_prefix && !url.is_glob() {
            return None;
        }
        let listed = if is_prefix {
            store.list(&url).await.map(|all| {
                all.into_iter()
                    .filter(|e| {
                        e.url.name().ends_with(".parquet") && !outflow_store::is_hidden_name(e.url.name())
                    })
                    .collect::<Vec<_>>()
            })
        } else {
            store.glob(&url, "files").await
        };
        Some(listed.map(|entries| {
            let mut sizes = self.sizes.lock().expect("the size map is not poisoned");
            entries
                .into_iter()
                .map(|e| {
                    let url = e.url.to_string();
                    sizes.insert(url.clone(), e.size);
                    url
                })
                .collect()
        }))
    }
}
