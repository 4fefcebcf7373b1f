//! A small SPIR-V reflection: enough of a module's header and instructions to see its entry points,
//! the descriptor bindings and push-constant block it declares, its vertex inputs and its
//! workgroup size, so that programs can refuse a shader whose interface does not match what they
//! are created with. It reads; it does not validate the code (that is `spirv-val`'s job).

use crate::error::{ErrorClass, ResidencyError};
use crate::pipelines::compute::BindingKind;
use std::collections::HashMap;

/// The SPIR-V magic number, in the module's first word.
pub const MAGIC: u32 = 0x0723_0203;

/// Words that cannot be read as a SPIR-V module.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpirvError {
    /// Fewer than the five words of the header.
    #[error("{words} words are not a SPIR-V module (the header alone is 5 words)")]
    NoHeader {
        /// Words given.
        words: usize,
    },
    /// The first word is not the SPIR-V magic number (or the words are byte-swapped).
    #[error("the first word {found:#010x} is not the SPIR-V magic number 0x07230203")]
    BadMagic {
        /// The first word.
        found: u32,
    },
    /// An instruction runs past the end of the module, or has a word count of zero.
    #[error("the instruction at word {at} is truncated or malformed")]
    Truncated {
        /// Its first word.
        at: usize,
    },
    /// An instruction names an id the reflection cannot resolve (a type or constant missing).
    #[error("id {id} is used but not defined by a type or constant this reflection reads")]
    UnknownId {
        /// The id.
        id: u32,
    },
}

impl ResidencyError for SpirvError {
    fn class(&self) -> ErrorClass {
        match self {
            SpirvError::NoHeader { .. }
            | SpirvError::BadMagic { .. }
            | SpirvError::Truncated { .. }
            | SpirvError::UnknownId { .. } => ErrorClass::Refused,
        }
    }
}

/// The stage of an entry point (its execution model).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `GLCompute`.
    Compute,
    /// `Vertex`.
    Vertex,
    /// `Fragment`.
    Fragment,
    /// `RayGenerationKHR`.
    RayGeneration,
    /// `MissKHR`.
    Miss,
    /// `ClosestHitKHR`.
    ClosestHit,
    /// Any other execution model (its SPIR-V number).
    Other(u32),
}

/// A descriptor the module declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorBinding {
    /// `DescriptorSet` decoration.
    pub set: u32,
    /// `Binding` decoration.
    pub binding: u32,
    /// Its kind, or `None` for a descriptor type residency's programs cannot create (a separate
    /// image or sampler, a texel buffer, an input attachment).
    pub kind: Option<BindingKind>,
    /// Descriptors in it: 1, the length of an array of descriptors, or 0 for a runtime array.
    pub count: u32,
    /// Whether the shader may write it: a storage buffer with a member not decorated
    /// `NonWritable` (GLSL `readonly`), or a storage image whose variable is not; `false` for
    /// every other kind.
    pub writable: bool,
    /// For a uniform or storage buffer, bytes of its block without a trailing runtime array (the
    /// last fixed member's offset plus size): the least range the shader's fixed members need.
    /// A runtime array's elements are bounded by the range itself (`arrayLength`), so a block of
    /// only a runtime array needs 0. 0 for images.
    pub block_bytes: u32,
    /// Whether the module reads it with a sparse residency instruction (`OpImageSparse*`: GLSL's
    /// `sparseTexelFetchARB`, `sparseTextureLodARB` and the rest of `GL_ARB_sparse_texture2`),
    /// found by following each such instruction's image operand back through loads, copies,
    /// `OpSampledImage`, `OpImage`, access chains (arrays of images), selects, phis and function
    /// parameters to the variable. An image operand the reflection cannot follow to a variable
    /// marks every image binding of the module (the safe side). Such a binding needs a sparse
    /// image: drivers may crash running these instructions on an image without sparse residency
    /// (lavapipe does).
    pub sparse_residency: bool,
    /// For an image binding, the shape the shader declares (`OpTypeImage`); `None` for buffers.
    pub image: Option<ImageShape>,
}

/// What an image binding's `OpTypeImage` declares: the view a descriptor there must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageShape {
    /// The `Dim` operand: 0 = 1D, 1 = 2D, 2 = 3D, 3 = Cube (4 Rect, 5 Buffer, 6 SubpassData).
    pub dim: u32,
    /// The `Arrayed` operand.
    pub arrayed: bool,
    /// The `MS` operand (multisampled).
    pub multisampled: bool,
    /// The `Sampled Type` operand's numeric type (what a format must hold to be read as it).
    pub sampled_type: Numeric,
}

/// The numeric type of a vertex input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numeric {
    /// Floating point.
    Float,
    /// Signed integer.
    Sint,
    /// Unsigned integer.
    Uint,
    /// Anything else (a boolean, a struct, 64-bit types).
    Other,
}

impl Numeric {
    /// What a shader reads from `format`: `Uint` and `Sint` for `_UINT`/`_SINT` formats, `Other`
    /// for 64-bit ones, `Float` for the rest (UNORM, SNORM, sRGB, SFLOAT, BCn); a depth/stencil
    /// format reads float (its depth aspect). The one mapping for vertex attributes and image
    /// bindings.
    pub(crate) fn of_format(format: ash::vk::Format) -> Numeric {
        let name = format!("{format:?}");
        if name.starts_with('D') || name.starts_with("X8_D24") {
            Numeric::Float
        } else if name.ends_with("_UINT") {
            Numeric::Uint
        } else if name.ends_with("_SINT") {
            Numeric::Sint
        } else if name.starts_with("R64") {
            Numeric::Other
        } else {
            Numeric::Float
        }
    }
}

/// A `Location`-decorated `Input` variable of the module (a vertex attribute in a vertex shader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    /// `Location` decoration.
    pub location: u32,
    /// Its numeric type.
    pub numeric: Numeric,
}

/// What a module declares, as far as residency's programs need to know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    /// Entry points: stage and name.
    pub entry_points: Vec<(Stage, String)>,
    /// Every descriptor variable of the module (used or not), in declaration order.
    pub bindings: Vec<DescriptorBinding>,
    /// Bytes of the push-constant block (its last member's offset plus size), 0 without one.
    pub push_constant_bytes: u32,
    /// `Location`-decorated inputs that are not built-ins.
    pub inputs: Vec<Input>,
    /// The workgroup size of the `LocalSize` or `LocalSizeId` execution mode (of the last entry
    /// point that declares one; a specialisation constant counts with its default value).
    pub local_size: Option<[u32; 3]>,
    /// The `OpCapability` operands the module declares.
    pub capabilities: Vec<u32>,
}

/// `SparseResidency` (`OpImageSparse*`: residency codes), which needs `shaderResourceResidency`.
pub const CAPABILITY_SPARSE_RESIDENCY: u32 = 41;
/// `MinLod` (sampling with a minimum LOD operand), which needs `shaderResourceMinLod`.
pub const CAPABILITY_MIN_LOD: u32 = 42;
/// `RayQueryKHR` (`rayQueryEXT` of `GL_EXT_ray_query`), which needs VK_KHR_ray_query's `rayQuery`.
pub const CAPABILITY_RAY_QUERY: u32 = 4472;
/// `RayTracingKHR` (`GL_EXT_ray_tracing` stages), which needs VK_KHR_ray_tracing_pipeline.
pub const CAPABILITY_RAY_TRACING: u32 = 4479;
/// `RuntimeDescriptorArray` (needs `runtimeDescriptorArray`).
pub const CAPABILITY_RUNTIME_DESCRIPTOR_ARRAY: u32 = 5302;
/// `SampledImageArrayNonUniformIndexing` (needs `shaderSampledImageArrayNonUniformIndexing`).
pub const CAPABILITY_SAMPLED_IMAGE_ARRAY_NON_UNIFORM_INDEXING: u32 = 5307;

impl Interface {
    /// Whether the module has an entry point `name` of `stage`.
    pub fn has_entry_point(&self, stage: Stage, name: &str) -> bool {
        self.entry_points.iter().any(|(s, n)| *s == stage && n == name)
    }
}

// Opcodes, decorations and storage classes (SPIR-V specification, section 3).
const OP_ENTRY_POINT: u32 = 15;
const OP_EXECUTION_MODE: u32 = 16;
const OP_CAPABILITY: u32 = 17;
const OP_TYPE_BOOL: u32 = 20;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_VECTOR: u32 = 23;
const OP_TYPE_MATRIX: u32 = 24;
const OP_TYPE_IMAGE: u32 = 25;
const OP_TYPE_SAMPLER: u32 = 26;
const OP_TYPE_SAMPLED_IMAGE: u32 = 27;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_SPEC_CONSTANT: u32 = 50;
const OP_EXECUTION_MODE_ID: u32 = 331;
const OP_VARIABLE: u32 = 59;
const OP_FUNCTION: u32 = 54;
const OP_FUNCTION_PARAMETER: u32 = 55;
const OP_FUNCTION_CALL: u32 = 57;
const OP_LOAD: u32 = 61;
const OP_ACCESS_CHAIN: u32 = 65;
const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
const OP_PTR_ACCESS_CHAIN: u32 = 67;
const OP_COPY_OBJECT: u32 = 83;
const OP_SAMPLED_IMAGE: u32 = 86;
const OP_IMAGE: u32 = 100;
const OP_SELECT: u32 = 169;
const OP_PHI: u32 = 245;
/// `OpImageSparseSampleImplicitLod` (305) to `OpImageSparseDrefGather` (315); `OpImageSparseRead`
/// (320). Each has its (sampled) image as its third operand, after result type and result. (316,
/// `OpImageSparseTexelsResident`, reads a residency code, not an image.)
const OP_IMAGE_SPARSE_FIRST: u32 = 305;
const OP_IMAGE_SPARSE_LAST: u32 = 315;
const OP_IMAGE_SPARSE_READ: u32 = 320;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const OP_TYPE_ACCELERATION_STRUCTURE: u32 = 5341;

const DECORATION_BLOCK: u32 = 2;
const DECORATION_BUFFER_BLOCK: u32 = 3;
const DECORATION_ARRAY_STRIDE: u32 = 6;
const DECORATION_MATRIX_STRIDE: u32 = 7;
const DECORATION_BUILT_IN: u32 = 11;
const DECORATION_NON_WRITABLE: u32 = 24;
const DECORATION_LOCATION: u32 = 30;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const DECORATION_OFFSET: u32 = 35;

const STORAGE_UNIFORM_CONSTANT: u32 = 0;
const STORAGE_INPUT: u32 = 1;
const STORAGE_UNIFORM: u32 = 2;
const STORAGE_PUSH_CONSTANT: u32 = 9;
const STORAGE_STORAGE_BUFFER: u32 = 12;

const EXECUTION_MODE_LOCAL_SIZE: u32 = 17;
const EXECUTION_MODE_LOCAL_SIZE_ID: u32 = 38;
const DIM_BUFFER: u32 = 5;
const DIM_SUBPASS_DATA: u32 = 6;

/// A type the reflection knows.
#[derive(Clone, Debug)]
enum Type {
    Bool,
    Int { width: u32, signed: bool },
    Float { width: u32 },
    Vector { component: u32, count: u32 },
    Matrix { column: u32, count: u32 },
    Image { dim: u32, sampled: u32, shape: ImageShapeIds },
    Sampler,
    SampledImage { image: u32 },
    Array { element: u32, length: u32 },
    RuntimeArray { element: u32 },
    Struct { members: Vec<u32> },
    Pointer { pointee: u32 },
    AccelerationStructure,
}

/// An `OpTypeImage`'s operands, its sampled type still an id.
#[derive(Clone, Copy, Debug)]
struct ImageShapeIds {
    sampled_type: u32,
    arrayed: bool,
    multisampled: bool,
}

/// Reads the interface of a SPIR-V module.
pub fn reflect(words: &[u32]) -> Result<Interface, SpirvError> {
    if words.len() < 5 {
        return Err(SpirvError::NoHeader { words: words.len() });
    }
    if words[0] != MAGIC {
        return Err(SpirvError::BadMagic { found: words[0] });
    }
    let mut types: HashMap<u32, Type> = HashMap::new();
    let mut constants: HashMap<u32, u32> = HashMap::new();
    let mut decorations: HashMap<(u32, u32), u32> = HashMap::new();
    let mut member_offsets: HashMap<(u32, u32), u32> = HashMap::new();
    let mut member_matrix_strides: HashMap<(u32, u32), u32> = HashMap::new();
    let mut non_writable_members: std::collections::HashSet<(u32, u32)> = std::collections::HashSet::new();
    let mut variables: Vec<(u32, u32, u32)> = Vec::new(); // (pointer type, id, storage class)
    let mut interface = Interface::default();
    let mut local_size_ids: Option<[u32; 3]> = None;
    // What each id is derived from (for the images of sparse residency instructions).
    let mut sources: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut sparse_images: Vec<u32> = Vec::new();
    let mut parameters: HashMap<u32, Vec<u32>> = HashMap::new(); // function -> parameters
    let mut calls: Vec<(u32, Vec<u32>)> = Vec::new(); // (function, arguments)
    let mut function = None;
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let opcode = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(SpirvError::Truncated { at });
        }
        let op = &words[at + 1..at + count];
        let need = |n: usize| if op.len() < n { Err(SpirvError::Truncated { at }) } else { Ok(()) };
        match opcode {
            OP_CAPABILITY => {
                need(1)?;
                interface.capabilities.push(op[0]);
            }
            OP_ENTRY_POINT => {
                need(3)?;
                let stage = match op[0] {
                    0 => Stage::Vertex,
                    4 => Stage::Fragment,
                    5 => Stage::Compute,
                    5313 => Stage::RayGeneration,
                    5316 => Stage::ClosestHit,
                    5317 => Stage::Miss,
                    n => Stage::Other(n),
                };
                interface.entry_points.push((stage, literal_string(&op[2..])));
            }
            OP_EXECUTION_MODE => {
                need(2)?;
                if op[1] == EXECUTION_MODE_LOCAL_SIZE {
                    need(5)?;
                    interface.local_size = Some([op[2], op[3], op[4]]);
                }
            }
            OP_EXECUTION_MODE_ID => {
                need(2)?;
                if op[1] == EXECUTION_MODE_LOCAL_SIZE_ID {
                    need(5)?;
                    local_size_ids = Some([op[2], op[3], op[4]]);
                }
            }
            OP_TYPE_BOOL => {
                need(1)?;
                types.insert(op[0], Type::Bool);
            }
            OP_TYPE_INT => {
                need(3)?;
                types.insert(op[0], Type::Int { width: op[1], signed: op[2] != 0 });
            }
            OP_TYPE_FLOAT => {
                need(2)?;
                types.insert(op[0], Type::Float { width: op[1] });
            }
            OP_TYPE_VECTOR => {
                need(3)?;
                types.insert(op[0], Type::Vector { component: op[1], count: op[2] });
            }
            OP_TYPE_MATRIX => {
                need(3)?;
                types.insert(op[0], Type::Matrix { column: op[1], count: op[2] });
            }
            OP_TYPE_IMAGE => {
                need(7)?;
                let shape =
                    ImageShapeIds { sampled_type: op[1], arrayed: op[4] == 1, multisampled: op[5] == 1 };
                types.insert(op[0], Type::Image { dim: op[2], sampled: op[6], shape });
            }
            OP_TYPE_SAMPLER => {
                need(1)?;
                types.insert(op[0], Type::Sampler);
            }
            OP_TYPE_SAMPLED_IMAGE => {
                need(2)?;
                types.insert(op[0], Type::SampledImage { image: op[1] });
            }
            OP_TYPE_ARRAY => {
                need(3)?;
                let length = *constants.get(&op[2]).ok_or(SpirvError::UnknownId { id: op[2] })?;
                types.insert(op[0], Type::Array { element: op[1], length });
            }
            OP_TYPE_RUNTIME_ARRAY => {
                need(2)?;
                types.insert(op[0], Type::RuntimeArray { element: op[1] });
            }
            OP_TYPE_STRUCT => {
                need(1)?;
                types.insert(op[0], Type::Struct { members: op[1..].to_vec() });
            }
            OP_TYPE_POINTER => {
                need(3)?;
                types.insert(op[0], Type::Pointer { pointee: op[2] });
            }
            OP_TYPE_ACCELERATION_STRUCTURE => {
                need(1)?;
                types.insert(op[0], Type::AccelerationStructure);
            }
            OP_CONSTANT | OP_SPEC_CONSTANT => {
                need(3)?;
                constants.insert(op[1], op[2]);
            }
            OP_VARIABLE => {
                need(3)?;
                variables.push((op[0], op[1], op[2]));
            }
            OP_LOAD
            | OP_ACCESS_CHAIN
            | OP_IN_BOUNDS_ACCESS_CHAIN
            | OP_PTR_ACCESS_CHAIN
            | OP_COPY_OBJECT
            | OP_SAMPLED_IMAGE
            | OP_IMAGE => {
                need(3)?;
                sources.entry(op[1]).or_default().push(op[2]);
            }
            OP_SELECT => {
                need(5)?;
                sources.entry(op[1]).or_default().extend([op[3], op[4]]);
            }
            OP_PHI => {
                need(2)?;
                sources.entry(op[1]).or_default().extend(op[2..].iter().step_by(2));
            }
            OP_FUNCTION => {
                need(2)?;
                function = Some(op[1]);
            }
            OP_FUNCTION_PARAMETER => {
                need(2)?;
                let Some(function) = function else { return Err(SpirvError::Truncated { at }) };
                parameters.entry(function).or_default().push(op[1]);
            }
            OP_FUNCTION_CALL => {
                need(3)?;
                calls.push((op[2], op[3..].to_vec()));
            }
            OP_IMAGE_SPARSE_FIRST..=OP_IMAGE_SPARSE_LAST | OP_IMAGE_SPARSE_READ => {
                need(3)?;
                sparse_images.push(op[2]);
            }
            OP_DECORATE => {
                need(2)?;
                decorations.insert((op[0], op[1]), op.get(2).copied().unwrap_or(0));
            }
            OP_MEMBER_DECORATE => {
                need(3)?;
                let value = op.get(3).copied().unwrap_or(0);
                match op[2] {
                    DECORATION_OFFSET => {
                        member_offsets.insert((op[0], op[1]), value);
                    }
                    DECORATION_MATRIX_STRIDE => {
                        member_matrix_strides.insert((op[0], op[1]), value);
                    }
                    DECORATION_BUILT_IN => {
                        // A struct of built-ins (`gl_PerVertex`): mark the struct itself.
                        decorations.insert((op[0], DECORATION_BUILT_IN), value);
                    }
                    DECORATION_NON_WRITABLE => {
                        non_writable_members.insert((op[0], op[1]));
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        at += count;
    }
    if let Some(ids) = local_size_ids {
        let mut size = [0; 3];
        for (axis, id) in ids.into_iter().enumerate() {
            size[axis] = *constants.get(&id).ok_or(SpirvError::UnknownId { id })?;
        }
        interface.local_size = Some(size);
    }
    for (callee, arguments) in &calls {
        for (&parameter, &argument) in parameters.get(callee).into_iter().flatten().zip(arguments) {
            sources.entry(parameter).or_default().push(argument);
        }
    }
    let variable_ids: std::collections::HashSet<u32> = variables.iter().map(|&(_, id, _)| id).collect();
    let (sparse_variables, untraced) = trace_to_variables(&sparse_images, &sources, &variable_ids);
    let reflection = Reflection { types: &types, decorations: &decorations };
    for &(pointer, id, storage) in &variables {
        let pointee = match types.get(&pointer) {
            Some(Type::Pointer { pointee }) => *pointee,
            _ => return Err(SpirvError::UnknownId { id: pointer }),
        };
        match storage {
            STORAGE_UNIFORM_CONSTANT | STORAGE_UNIFORM | STORAGE_STORAGE_BUFFER => {
                let (element, count) = reflection.unwrap_arrays(pointee)?;
                let kind = reflection.descriptor_kind(storage, element)?;
                let read_only = decorations.contains_key(&(id, DECORATION_NON_WRITABLE))
                    || match (kind, types.get(&element)) {
                        (Some(BindingKind::StorageBuffer), Some(Type::Struct { members })) => {
                            (0..members.len() as u32).all(|m| non_writable_members.contains(&(element, m)))
                        }
                        _ => false,
                    };
                let writable = matches!(kind, Some(BindingKind::StorageBuffer | BindingKind::StorageImage))
                    && !read_only;
                let block_bytes = match kind {
                    Some(BindingKind::StorageBuffer | BindingKind::UniformBuffer) => {
                        reflection.size(element, None, &member_offsets, &member_matrix_strides)?
                    }
                    _ => 0,
                };
                let image =
                    matches!(types.get(&element), Some(Type::Image { .. } | Type::SampledImage { .. }));
                interface.bindings.push(DescriptorBinding {
                    set: decorations.get(&(id, DECORATION_DESCRIPTOR_SET)).copied().unwrap_or(0),
                    binding: decorations.get(&(id, DECORATION_BINDING)).copied().unwrap_or(0),
                    kind,
                    count,
                    writable,
                    block_bytes,
                    sparse_residency: sparse_variables.contains(&id) || (untraced && image),
                    image: reflection.image_shape(element),
                });
            }
            STORAGE_PUSH_CONSTANT => {
                let bytes = reflection.size(pointee, None, &member_offsets, &member_matrix_strides)?;
                interface.push_constant_bytes = interface.push_constant_bytes.max(bytes);
            }
            STORAGE_INPUT => {
                let built_in = decorations.contains_key(&(id, DECORATION_BUILT_IN))
                    || decorations.contains_key(&(pointee, DECORATION_BUILT_IN));
                if let (false, Some(&location)) = (built_in, decorations.get(&(id, DECORATION_LOCATION))) {
                    interface.inputs.push(Input { location, numeric: reflection.numeric(pointee) });
                }
            }
            _ => {}
        }
    }
    Ok(interface)
}

/// The variables the ids `from` are derived from (following `sources`), and whether some path
/// ends at an id that is neither a variable nor derived from anything known.
fn trace_to_variables(
    from: &[u32],
    sources: &HashMap<u32, Vec<u32>>,
    variables: &std::collections::HashSet<u32>,
) -> (std::collections::HashSet<u32>, bool) {
    let mut found = std::collections::HashSet::new();
    let mut untraced = false;
    let mut seen = std::collections::HashSet::new();
    let mut stack = from.to_vec();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        if variables.contains(&id) {
            found.insert(id);
        } else if let Some(derived) = sources.get(&id) {
            stack.extend(derived);
        } else {
            untraced = true;
        }
    }
    (found, untraced)
}

/// A nul-terminated UTF-8 string packed in words (little-endian within each word).
fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

struct Reflection<'a> {
    types: &'a HashMap<u32, Type>,
    decorations: &'a HashMap<(u32, u32), u32>,
}

impl Reflection<'_> {
    fn get(&self, id: u32) -> Result<&Type, SpirvError> {
        self.types.get(&id).ok_or(SpirvError::UnknownId { id })
    }

    /// The element type under arrays of descriptors, and how many descriptors (0: runtime).
    fn unwrap_arrays(&self, mut ty: u32) -> Result<(u32, u32), SpirvError> {
        let mut count = 1u32;
        loop {
            match self.get(ty)? {
                Type::Array { element, length } => {
                    count = count.saturating_mul(*length);
                    ty = *element;
                }
                Type::RuntimeArray { element } => {
                    count = 0;
                    ty = *element;
                }
                _ => return Ok((ty, count)),
            }
        }
    }

    fn descriptor_kind(&self, storage: u32, ty: u32) -> Result<Option<BindingKind>, SpirvError> {
        let decorated = |d| self.decorations.contains_key(&(ty, d));
        Ok(match (storage, self.get(ty)?) {
            (STORAGE_STORAGE_BUFFER, Type::Struct { .. }) => Some(BindingKind::StorageBuffer),
            (STORAGE_UNIFORM, Type::Struct { .. }) if decorated(DECORATION_BUFFER_BLOCK) => {
                Some(BindingKind::StorageBuffer)
            }
            (STORAGE_UNIFORM, Type::Struct { .. }) if decorated(DECORATION_BLOCK) => {
                Some(BindingKind::UniformBuffer)
            }
            (STORAGE_UNIFORM_CONSTANT, Type::SampledImage { .. }) => Some(BindingKind::SampledImage),
            (STORAGE_UNIFORM_CONSTANT, Type::Image { dim, sampled: 2, .. })
                if *dim != DIM_BUFFER && *dim != DIM_SUBPASS_DATA =>
            {
                Some(BindingKind::StorageImage)
            }
            (STORAGE_UNIFORM_CONSTANT, Type::AccelerationStructure) => {
                Some(BindingKind::AccelerationStructure)
            }
            // Separate images and samplers, texel buffers, input attachments: descriptor types
            // residency's programs do not create.
            _ => None,
        })
    }

    /// Bytes of a value of `ty` in a block (`matrix_stride` for a matrix member).
    fn size(
        &self,
        ty: u32,
        matrix_stride: Option<u32>,
        offsets: &HashMap<(u32, u32), u32>,
        strides: &HashMap<(u32, u32), u32>,
    ) -> Result<u32, SpirvError> {
        Ok(match self.get(ty)? {
            Type::Bool => 4,
            Type::Int { width, .. } | Type::Float { width } => width / 8,
            Type::Vector { component, count } => self.size(*component, None, offsets, strides)? * count,
            Type::Matrix { column, count } => match matrix_stride {
                Some(stride) => stride * count,
                None => self.size(*column, None, offsets, strides)? * count,
            },
            Type::Array { element, length } => {
                let stride = match self.decorations.get(&(ty, DECORATION_ARRAY_STRIDE)) {
                    Some(&stride) => stride,
                    None => self.size(*element, None, offsets, strides)?,
                };
                stride.saturating_mul(*length)
            }
            Type::Struct { members } => {
                let mut end = 0u32;
                for (i, &member) in members.iter().enumerate() {
                    let key = (ty, i as u32);
                    let offset = offsets.get(&key).copied().unwrap_or(end);
                    let size = self.size(member, strides.get(&key).copied(), offsets, strides)?;
                    end = end.max(offset.saturating_add(size));
                }
                end
            }
            // Opaque types cannot be in a block, and a runtime array's size is the range's (it is
            // a block's last member); count nothing.
            _ => 0,
        })
    }

    /// The shape of an image or sampled-image type; `None` for anything else.
    fn image_shape(&self, ty: u32) -> Option<ImageShape> {
        let ty = match self.types.get(&ty)? {
            Type::SampledImage { image } => *image,
            _ => ty,
        };
        match self.types.get(&ty)? {
            Type::Image { dim, shape, .. } => Some(ImageShape {
                dim: *dim,
                arrayed: shape.arrayed,
                multisampled: shape.multisampled,
                sampled_type: self.numeric(shape.sampled_type),
            }),
            _ => None,
        }
    }

    fn numeric(&self, ty: u32) -> Numeric {
        let mut ty = ty;
        loop {
            match self.types.get(&ty) {
                Some(Type::Vector { component, .. }) | Some(Type::Array { element: component, .. }) => {
                    ty = *component
                }
                Some(Type::Matrix { column, .. }) => ty = *column,
                Some(Type::Float { width: 16 | 32 }) => return Numeric::Float,
                Some(Type::Int { width: 8..=32, signed: true }) => return Numeric::Sint,
                Some(Type::Int { width: 8..=32, signed: false }) => return Numeric::Uint,
                _ => return Numeric::Other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipelines::shaders::{self, Shader};

    /// The bindings of set 0 the module reads with sparse residency instructions.
    fn sparse_bindings(words: &[u32]) -> Vec<u32> {
        let interface = reflect(words).unwrap();
        let mut marked: Vec<u32> =
            interface.bindings.iter().filter(|b| b.sparse_residency).map(|b| b.binding).collect();
        marked.sort_unstable();
        marked
    }

    #[test]
    fn sparse_residency_marks_exactly_the_bindings_read_with_opimagesparse() {
        // Binding 0 (the texture) of the four shaders that use `GL_ARB_sparse_texture2`
        // (`residencyFetch`, `sparseTextureLodARB`), and the footprint shaders built with
        // `RESIDENCY_CODES` (the texture and its fully resident twin, both read with residency
        // codes) and the `sparseTextureClampARB` fragment shader; no other binding of any shipped shader, however it samples (the software path,
        // `texelFetch`, storage images, buffers).
        let expected: [(&Shader, &[u32]); 7] = [
            (&shaders::SPARSE_PROBE, &[0]),
            (&shaders::MULTI_DEVICE, &[0]),
            (&shaders::DISTANCE_FIELD, &[0]),
            (&shaders::TEXTURE_ARRAY, &[0]),
            (&shaders::SPARSE_FOOTPRINT_CODES, &[0, 2]),
            (&shaders::SPARSE_FOOTPRINT_CLAMP, &[0, 2]),
            (&shaders::SPARSE_CLAMP_FRAG, &[0]),
        ];
        let mut wrong = Vec::new();
        for shader in shaders::ALL {
            let want = expected.iter().find(|(e, _)| std::ptr::eq(*e, shader)).map_or(&[][..], |(_, b)| *b);
            let got = sparse_bindings(shader.words());
            if got != want {
                wrong.push(format!("{}: {got:?}, expected {want:?}", shader.name()));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// A module's words with the one instruction at word `at` replaced by `new` (same length).
    fn patched(words: &[u32], at: usize, new: &[u32]) -> Vec<u32> {
        let mut words = words.to_vec();
        words[at..at + new.len()].copy_from_slice(new);
        words
    }

    #[test]
    fn a_sparse_instruction_whose_image_cannot_be_traced_marks_every_image_binding() {
        // SPARSE_PROBE's `OpImageSparseFetch` pointed at an id nothing defines (its result type
        // id): every image binding (the texture) is marked, buffers are not.
        let words = shaders::SPARSE_PROBE.words();
        let mut at = 5;
        while words[at] & 0xffff != 313 {
            at += (words[at] >> 16) as usize;
        }
        let result_type = words[at + 1];
        let words = patched(words, at + 3, &[result_type]);
        let interface = reflect(&words).unwrap();
        for b in &interface.bindings {
            let image = matches!(b.kind, Some(BindingKind::SampledImage | BindingKind::StorageImage));
            assert_eq!(b.sparse_residency, image, "binding {}", b.binding);
        }
    }
}
