//! Pipelines residency records with: compute programs and dynamic-rendering graphics programs
//! (both with reflected descriptor sets that keep what they bind alive, in `descriptors`), the shaders residency ships (`shaders`) and
//! the SPIR-V reader that checks a shader's interface (`spirv`), acceleration structures for ray
//! queries (`acceleration`) and ray-tracing pipelines with their shader tables (`ray_tracing`).

pub mod acceleration;
pub mod compute;
pub(crate) mod descriptors;
pub mod graphics;
pub mod ray_tracing;
pub mod shaders;
pub mod spirv;
