//! The tight placed-resource alignment engine.
