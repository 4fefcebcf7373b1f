//! Pipelines residency records with: compute programs (descriptor sets that keep what they bind
//! alive), a minimal dynamic-rendering graphics program, the shaders residency ships (`shaders`) and
//! the SPIR-V reader that checks a shader's interface (`spirv`).

pub mod compute;
pub mod graphics;
pub mod shaders;
pub mod spirv;
