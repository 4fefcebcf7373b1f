//! Pipelines residency records with: compute programs (descriptor sets that keep what they bind
//! alive) and a minimal dynamic-rendering graphics program.

pub mod compute;
pub mod graphics;
