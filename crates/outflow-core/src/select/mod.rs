//! Field selection and flattening on Arrow schemas and batches, after Beam's SelectHelpers.
//!
//! - [`FieldAccessDescriptor`]: which fields to select, as dotted paths (`user`,
//!   `location.latitude`, `events.location.latitude`, `user.*`, `*`).
//! - [`select_schema`] and [`select_batch`]: the selected columns. A selected struct stays
//!   a struct, a nested leaf comes up to the top level under its own name, and lists and
//!   maps are kept around what is selected inside them.
//! - [`flatten_schema`] and [`flatten_batch`]: every nested struct replaced by its leaves,
//!   named by a [`FlattenPolicy`].
//!
//! All four are pure: they plan from the schema alone, and a batch's result always has the
//! schema that the matching `_schema` function returns.
//!
//! ```
//! use std::sync::Arc;
//!
//! use arrow_array::{ArrayRef, Float64Array, RecordBatch, StructArray};
//! use arrow_schema::{DataType, Field};
//! use outflow_core::select::{FieldAccessDescriptor, FlattenPolicy, flatten_batch, select_batch};
//!
//! let location = StructArray::from(vec![
//!     (
//!         Arc::new(Field::new("latitude", DataType::Float64, false)),
//!         Arc::new(Float64Array::from(vec![52.5, 48.9])) as ArrayRef,
//!     ),
//!     (
//!         Arc::new(Field::new("longitude", DataType::Float64, false)),
//!         Arc::new(Float64Array::from(vec![13.4, 2.3])) as ArrayRef,
//!     ),
//! ]);
//! let batch = RecordBatch::try_from_iter([("location", Arc::new(location) as ArrayRef)]).unwrap();
//!
//! let fields = FieldAccessDescriptor::parse(["location.latitude"]).unwrap();
//! let selected = select_batch(&batch, &fields).unwrap();
//! assert_eq!(selected.schema().field(0).name(), "latitude");
//!
//! let flat = flatten_batch(&batch, FlattenPolicy::ConcatFieldNames).unwrap();
//! let names: Vec<_> = flat.schema().fields().iter().map(|f| f.name().clone()).collect();
//! assert_eq!(names, ["location_latitude", "location_longitude"]);
//! ```

mod descriptor;
mod flatten;
mod plan;
mod project;
#[cfg(test)]
mod testing;

pub use descriptor::FieldAccessDescriptor;
pub use flatten::{FlattenPolicy, flatten_batch, flatten_schema};
pub use project::{select_batch, select_schema};
