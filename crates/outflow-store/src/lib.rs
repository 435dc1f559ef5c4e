//! Where users' files live when they are not on this machine: object stores.
//!
//! Job sources and AddFiles take object URLs (`s3://bucket/key`) as well as local paths.
//! This crate holds what they share:
//! - [`ObjectUrl`]: an object's or a prefix's URL, parsed once, shown as given.
//! - [`StorageSettings`]: how to reach a store, in the property names Iceberg's FileIO uses
//!   (`s3.endpoint`, `s3.region`, `s3.path-style-access`, `s3.access-key-id`, ...), with
//!   secrets kept out of `Debug` output. Without keys, the store's usual credential chain
//!   applies (for S3: the `AWS_*` environment variables, profile files, instance metadata).
//! - [`ObjectStore`]: listings, sizes and ranged reads of one bucket, every call with a
//!   deadline and bounded retries, every error naming the object.
//! - [`ObjectParquet`]: a Parquet file in a store for parquet's async reader (footer by a
//!   suffix read, then the column chunks a read needs).
//! - [`blocking`]: the same calls from synchronous code (the job source's reading thread).
//!
//! S3 and S3-compatible stores are supported today, through Apache OpenDAL (the library
//! iceberg-rust's storage uses too).

pub mod blocking;
mod location;
mod parquet;
mod settings;
mod store;

pub use self::location::{ObjectUrl, Scheme, is_hidden_name, is_object_url};
pub use self::parquet::ObjectParquet;
pub use self::settings::StorageSettings;
pub use self::store::{ObjectEntry, ObjectStore};
