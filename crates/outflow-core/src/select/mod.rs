//! Field selection and flattening on Arrow schemas and batches, after Beam's SelectHelpers.
