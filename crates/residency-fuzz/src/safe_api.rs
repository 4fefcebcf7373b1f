//! The `safe_api` target: random sequences of public safe calls of `residency_vulkan` on a real
//! device set (lavapipe opened twice in CI) under the validation layer with synchronization
//! validation.
//!
//! An input is bytes decoded by `Input` into at most [`MAX_OPS`] operations over a small world:
//! buffers (of the device, of [`BufferPool`]s, of [`LinearPool`]s), images, views and samplers, a
//! sparse tile pool with sparse images, an [`Uploader`], a fill program (the shipped
//! `shaders::FILL`), three [`CommandContext`]s (two on device 0, one on device 1) and the
//! [`Submission`]s they issued, a [`TransientPool`], and a [`Streamer`] with small in-memory
//! textures. Sizes, offsets, counts and extents come from `Input::size` and `extreme_u32`: mostly
//! small, often 0, 1, `u32::MAX`, `u64::MAX`, `2^32 − 1` and powers of two.
//!
//! Every typed error a safe call returns is fine. A finding is a panic (caught per input), a
//! validation message, an object left alive once the world is dropped and the devices idle (a
//! leak), a crash or a hang; the last two are seen by the driver (`src/bin/safe_api_fuzz.rs`), which
//! runs inputs in a child process under a watchdog.
//!
//! Known-open findings are classes ([`Class`]): each is a kind of call that reaches a bug another
//! change closes (the cause of issue #29 it belongs to is in [`Class::cause`]). An input decodes to
//! the same calls whatever is skipped, except that a call of a skipped class is replaced by its
//! well-formed twin (a token asked of the context that issued it, an offset that does not wrap),
//! so that a run can go on past a known bug.

use crate::input::Input;
use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FeedbackBuffer, FeedbackSampling, FnSource, TileSource};
use residency_core::sync::Use;
use residency_core::tiles::{ResidencyPath, SparseImageDesc, TexelRegion, TilePoolDesc};
use residency_core::usage::{BufferPoolUsage, BufferUsage, ImageUsage};
use residency_core::vt_file::VtDesc;
use residency_vulkan::ash::vk;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::recording::MemoryDependency;
use residency_vulkan::sparse::{SparseImage, SparseTilePool};
use residency_vulkan::streaming::{Streamer, StreamerDesc, VirtualTexture};
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{
    shaders, Buffer, BufferDesc, BufferInit, BufferPool, BufferPoolDesc, CommandContext, Device, DeviceSet,
    Filter, Image, ImageDesc, ImageView, LinearPool, LinearPoolDesc, Sampler, Submission, Uploader,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Operations per input at most.
pub const MAX_OPS: usize = 48;
/// Objects of each kind alive at most (older ones are dropped first).
const MAX_LIVE: usize = 8;

/// A kind of call that reaches a known-open bug; skipped (replaced by its well-formed twin) when
/// named in the run's skip set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A [`Submission`] asked of a context that did not issue it (another context of the same
    /// device or of another device): `is_complete`, `wait_for`, `wait`.
    ForeignToken,
    /// `SparseImage::read_region` with an offset whose sum with the extent wraps `u32`.
    ReadRegionWrap,
    /// A `LinearPoolDesc` size near `u64::MAX` (the rounded size wraps).
    LinearHuge,
    /// `FeedbackSampling` with extreme values (a stride whose square wraps, interval 0).
    FeedbackSamplingExtreme,
    /// A dispatch of the shipped fill shader whose count is more than its bound buffer holds.
    FillCount,
    /// A copy between two buffers that share memory (transient aliases).
    AliasedCopy,
    /// A `StreamerDesc` budget near `u32::MAX` tiles (rounded up to whole heaps, it overflows).
    StreamerBudget,
    /// `BufferPoolDesc::with_page_size` near `u64::MAX` (rounded up to 64 KiB, it overflows).
    PageSizeHuge,
    /// `TilePoolDesc::with_tiles_per_heap` huge: the pool's first heap allocates a host table of
    /// that many entries (an abort when the allocation fails).
    TilesPerHeapHuge,
    /// An image description with more mip levels than its extent has, handed to `vkCreateImage`.
    ImageMips,
    /// `Recording::fill_buffer` / `update_buffer` with an offset near `u64::MAX` into a buffer
    /// at a non-zero offset of its page (the alignment check adds them unchecked).
    TransferOffsetWrap,
    /// An image (or sparse image) larger than the device's image limits allow (extent, layers,
    /// `maxResourceSize`), handed to `vkCreateImage`.
    ImageLimits,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 12] = [
        Class::ForeignToken,
        Class::ReadRegionWrap,
        Class::LinearHuge,
        Class::FeedbackSamplingExtreme,
        Class::FillCount,
        Class::AliasedCopy,
        Class::StreamerBudget,
        Class::PageSizeHuge,
        Class::TilesPerHeapHuge,
        Class::ImageMips,
        Class::TransferOffsetWrap,
        Class::ImageLimits,
    ];

    /// The class's name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Class::ForeignToken => "foreign-token",
            Class::ReadRegionWrap => "read-region-wrap",
            Class::LinearHuge => "linear-huge",
            Class::FeedbackSamplingExtreme => "feedback-sampling",
            Class::FillCount => "fill-count",
            Class::AliasedCopy => "aliased-copy",
            Class::StreamerBudget => "streamer-budget",
            Class::PageSizeHuge => "page-size-huge",
            Class::TilesPerHeapHuge => "tiles-per-heap-huge",
            Class::ImageMips => "image-mips",
            Class::TransferOffsetWrap => "transfer-offset-wrap",
            Class::ImageLimits => "image-limits",
        }
    }

    /// The class of a name, if any.
    pub fn parse(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The cause of issue #29 it belongs to.
    pub fn cause(self) -> &'static str {
        match self {
            Class::ForeignToken => "#29 cause 1 (tokens trusted by anyone who holds them)",
            Class::ReadRegionWrap
            | Class::LinearHuge
            | Class::StreamerBudget
            | Class::PageSizeHuge
            | Class::TilesPerHeapHuge
            | Class::TransferOffsetWrap => "#29 cause 2 (unchecked arithmetic on caller input)",
            Class::FeedbackSamplingExtreme => "#29 causes 2/3 (arithmetic; public fields of descriptions)",
            Class::FillCount => "#29 cause 4 (shipped shaders trust their inputs)",
            Class::AliasedCopy | Class::ImageMips | Class::ImageLimits => {
                "#29 cause 6 (a check on one path and not its twin)"
            }
        }
    }
}

/// The classes known open on this branch: skipped by the bounded test and the corpus replay, and
/// by the long driver unless told otherwise. A fix removes its class here, and the regression
/// inputs of that class in `fuzz/regressions/safe_api/` then exercise it.
pub const KNOWN_OPEN: &[Class] = &[];

/// The `index`-th random input of `seed` (32 to 1024 bytes, SplitMix64): what the bounded test
/// and the long driver run, so a finding of either is replayed by its seed and index.
pub fn generated(seed: u64, index: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x1000_0000_01b3) ^ index.wrapping_mul(0x9e37_79b9);
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let len = 32 + (next() % 993) as usize;
    (0..len).map(|_| next() as u8).collect()
}

/// What one input did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Operations run (each one or more public calls).
    pub ops: usize,
    /// Public calls made.
    pub calls: u64,
    /// Calls that returned a typed error (fine).
    pub errors: u64,
    /// Classes the input reached (skipped ones replaced; open ones called).
    pub reached: BTreeSet<Class>,
}

/// A finding of one input.
#[derive(Debug, Clone)]
pub enum Finding {
    /// A panic in a safe call (its message).
    Panic(String),
    /// Validation messages (id: text).
    Validation(Vec<String>),
    /// Objects left alive on a device once everything was dropped and the device idle.
    Leak(String),
}

impl Finding {
    /// One line.
    pub fn summary(&self) -> String {
        match self {
            Finding::Panic(m) => format!("panic: {m}"),
            Finding::Validation(v) => format!("validation: {}", v.join(" | ")),
            Finding::Leak(l) => format!("leak: {l}"),
        }
    }
}

/// Runs one input on `set` (at least one device; two for the cross-device calls), skipping the
/// classes in `skip`; returns what it did, or the first finding.
pub fn run_input(set: &DeviceSet, data: &[u8], skip: &[Class]) -> Result<Outcome, (Finding, Outcome)> {
    install_panic_hook();
    let before = set.validation_log().problem_count();
    let objects = |d: &Device| d.ledger().live_objects().into_iter().filter(|o| o.kind != "memory").count();
    let live_before: Vec<usize> = set.devices().iter().map(|d| objects(d)).collect();
    let mut outcome = Outcome::default();
    let panicked = {
        let outcome = &mut outcome;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let mut world = World::new(set, skip);
            let mut input = Input::new(data);
            while outcome.ops < MAX_OPS && !input.is_empty() {
                world.op(&mut input);
                outcome.ops += 1;
            }
            world.teardown();
            outcome.calls = world.calls;
            outcome.errors = world.errors;
            outcome.reached = world.reached.clone();
        }))
    };
    for device in set.devices() {
        if !device.is_lost() {
            let _ = device.wait_idle();
        }
        device.maintain();
    }
    if let Err(payload) = panicked {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic without a message".into());
        let at = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_default();
        return Err((Finding::Panic(format!("{message} at {at}")), outcome));
    }
    let problems = set.validation_log().problems_since(before);
    if !problems.is_empty() {
        let lines = problems.iter().map(|p| format!("{}: {}", p.id, first_line(&p.text))).collect();
        return Err((Finding::Validation(lines), outcome));
    }
    for (device, before) in set.devices().iter().zip(live_before) {
        if objects(device) > before {
            let live: Vec<String> = device
                .ledger()
                .live_objects()
                .into_iter()
                .filter(|o| o.kind != "memory")
                .map(|o| format!("{} {}", o.kind, o.name))
                .collect();
            return Err((Finding::Leak(format!("device {}: {}", device.index(), live.join(", "))), outcome));
        }
    }
    Ok(outcome)
}

/// Where the last panic happened (`file:line`), recorded by the hook.
static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// A panic hook that records where a panic happened (the finding says it), then prints it as the
/// default hook does (a panic of the harness around the fuzzer, a failed assertion of the test,
/// must still say why), installed once.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let mut at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            if !at.starts_with("crates/") {
                // A panic inside the standard library (an overflow in `div_ceil`, …): the first
                // frame of residency's own code says where.
                let trace = std::backtrace::Backtrace::force_capture().to_string();
                if let Some(frame) = trace.lines().map(str::trim).find(|l| {
                    l.starts_with("at ") && l.contains("crates/residency-") && !l.contains("residency-fuzz")
                }) {
                    at = format!("{} (in {at})", frame.trim_start_matches("at ").trim_start_matches("./"));
                }
            }
            *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
            default(info);
        }));
    });
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.chars().take(300).collect()
}

/// A `u32` that is often at an edge: 0, 1, `u32::MAX`, `2^31`, small, or anything.
pub(crate) fn extreme_u32(input: &mut Input<'_>) -> u32 {
    match input.u8() % 12 {
        0 => 0,
        1 => 1,
        2 => u32::MAX,
        3 => u32::MAX - u32::from(input.u8()),
        4 => 1 << input.below(32),
        5 => input.u32(),
        _ => u32::from(input.u8()),
    }
}

/// A context with the index of its device.
struct Context {
    ctx: CommandContext,
    /// Index into `World::contexts` of the one that issued each token is kept with the token.
    device: usize,
}

/// A submission with the context that issued it.
struct Token {
    issuer: usize,
    submission: Submission,
}

struct StreamState {
    streamer: Streamer,
    textures: Vec<VirtualTexture>,
    context: CommandContext,
}

struct World<'s> {
    set: &'s DeviceSet,
    devices: Vec<Arc<Device>>,
    skip: Vec<Class>,
    calls: u64,
    errors: u64,
    reached: BTreeSet<Class>,
    buffers: Vec<Buffer>,
    pools: Vec<BufferPool>,
    linear: Vec<LinearPool>,
    images: Vec<Image>,
    views: Vec<ImageView>,
    samplers: Vec<Sampler>,
    tiles: Option<SparseTilePool>,
    sparse: Vec<SparseImage>,
    uploader: Option<Uploader>,
    fill: Option<ComputeProgram>,
    contexts: Vec<Context>,
    tokens: Vec<Token>,
    transient: Option<TransientPool>,
    stream: Option<StreamState>,
    next_name: u64,
}

impl<'s> World<'s> {
    fn new(set: &'s DeviceSet, skip: &[Class]) -> World<'s> {
        World {
            set,
            devices: set.devices().to_vec(),
            skip: skip.to_vec(),
            calls: 0,
            errors: 0,
            reached: BTreeSet::new(),
            buffers: Vec::new(),
            pools: Vec::new(),
            linear: Vec::new(),
            images: Vec::new(),
            views: Vec::new(),
            samplers: Vec::new(),
            tiles: None,
            sparse: Vec::new(),
            uploader: None,
            fill: None,
            contexts: Vec::new(),
            tokens: Vec::new(),
            transient: None,
            stream: None,
            next_name: 0,
        }
    }

    /// Whether a call of `class` is made as decoded (`true`) or replaced by its twin.
    fn allow(&mut self, class: Class) -> bool {
        self.reached.insert(class);
        !self.skip.contains(&class)
    }

    fn name(&mut self, what: &str) -> String {
        self.next_name += 1;
        format!("fuzz {what} {}", self.next_name)
    }

    /// Counts a call and its typed error, if any.
    fn note<T, E>(&mut self, result: Result<T, E>) -> Option<T> {
        self.calls += 1;
        match result {
            Ok(v) => Some(v),
            Err(_) => {
                self.errors += 1;
                None
            }
        }
    }

    fn device(&self, input: &mut Input<'_>) -> Arc<Device> {
        Arc::clone(&self.devices[input.below(self.devices.len() as u64) as usize])
    }

    fn push<T>(list: &mut Vec<T>, item: T) {
        if list.len() >= MAX_LIVE {
            list.remove(0);
        }
        list.push(item);
    }

    fn usage(input: &mut Input<'_>) -> BufferUsage {
        match input.u8() % 4 {
            0 => BufferUsage::ALL,
            1 => BufferUsage::TRANSFER | BufferUsage::STORAGE,
            2 => BufferUsage::from_bits_truncate(input.u32()),
            _ => BufferUsage::TRANSFER,
        }
    }

    fn intent(input: &mut Input<'_>) -> MemoryIntent {
        input.pick(&[
            MemoryIntent::DeviceLocal,
            MemoryIntent::Upload,
            MemoryIntent::Readback,
            MemoryIntent::DeviceLocalHostVisible,
        ])
    }

    fn op(&mut self, input: &mut Input<'_>) {
        match input.u8() % 24 {
            0 => self.create_buffer(input),
            1 => self.create_pool(input),
            2 => self.pool_buffer(input),
            3 => self.create_linear(input),
            4 => self.linear_buffer(input),
            5 => self.drop_something(input),
            6 => self.buffer_access(input),
            7 | 8 => self.submit(input),
            9 | 10 => self.token(input),
            11 => self.create_image(input),
            12 => self.create_view(input),
            13 => self.create_sampler(input),
            14 => self.create_sparse(input),
            15 => self.sparse_commit(input),
            16 => self.sparse_read(input),
            17 => self.upload(input),
            18 => self.read_back(input),
            19 => self.create_stream(input),
            20 | 21 => self.stream_frame(input),
            22 => self.stream_texture(input),
            _ => self.transient_frame(input),
        }
    }

    fn create_buffer(&mut self, input: &mut Input<'_>) {
        let device = self.device(input);
        let name = self.name("buffer");
        let mut desc =
            BufferDesc::new(name, input.size(), Self::usage(input)).with_intent(Self::intent(input));
        if input.bool() {
            desc = desc.with_alignment(input.alignment(20));
        }
        if input.bool() {
            desc = desc.committed();
        }
        if let Some(b) = self.note(device.create_buffer(&desc)) {
            Self::push(&mut self.buffers, b);
        }
    }

    fn create_pool(&mut self, input: &mut Input<'_>) {
        let device = self.device(input);
        let name = self.name("pool");
        let usage =
            if input.bool() { BufferPoolUsage::Known(Self::usage(input)) } else { BufferPoolUsage::Unknown };
        let mut desc = BufferPoolDesc::new(name, usage).with_memory(Self::intent(input));
        if input.bool() {
            let mut page = input.size();
            if page > u64::MAX - (64 << 10) && !self.allow(Class::PageSizeHuge) {
                page = 1 << 20;
            }
            desc = desc.with_page_size(page);
        }
        if input.bool() {
            desc = desc.with_arenas(extreme_u32(input));
        }
        if let Some(p) = self.note(BufferPool::new(device, desc)) {
            Self::push(&mut self.pools, p);
        }
    }

    fn pool_buffer(&mut self, input: &mut Input<'_>) {
        if self.pools.is_empty() {
            return;
        }
        let i = input.below(self.pools.len() as u64) as usize;
        let name = self.name("pooled");
        let mut init = BufferInit::new(name, input.size());
        if input.bool() {
            init = init.with_usage(Self::usage(input));
        }
        if input.bool() {
            init = init.with_alignment(input.alignment(20));
        }
        if let Some(b) = self.note(self.pools[i].init_buffer(&init)) {
            Self::push(&mut self.buffers, b);
        }
    }

    fn create_linear(&mut self, input: &mut Input<'_>) {
        let device = self.device(input);
        let name = self.name("linear");
        let mut size = input.size();
        if size > u64::MAX / 2 && !self.allow(Class::LinearHuge) {
            size = 1 << 20;
        }
        let desc = LinearPoolDesc::new(name, size).with_memory(Self::intent(input));
        if let Some(p) = self.note(LinearPool::new(device, desc)) {
            Self::push(&mut self.linear, p);
        }
    }

    fn linear_buffer(&mut self, input: &mut Input<'_>) {
        if self.linear.is_empty() {
            return;
        }
        let i = input.below(self.linear.len() as u64) as usize;
        let name = self.name("linear buffer");
        let mut init = BufferInit::new(name, input.size());
        if input.bool() {
            init = init.with_usage(Self::usage(input));
        }
        let result = if input.bool() {
            self.linear[i].create_buffer(&init)
        } else {
            self.linear[i].create_buffer_upper(&init)
        };
        if let Some(b) = self.note(result) {
            Self::push(&mut self.buffers, b);
        }
    }

    fn drop_something(&mut self, input: &mut Input<'_>) {
        let k = input.u8() % 10;
        let i = input.u8() as usize;
        fn take<T>(list: &mut Vec<T>, i: usize) {
            if !list.is_empty() {
                let len = list.len();
                drop(list.remove(i % len));
            }
        }
        self.calls += 1;
        match k {
            0..=2 => take(&mut self.buffers, i),
            3 => take(&mut self.pools, i),
            4 => take(&mut self.linear, i),
            5 => take(&mut self.images, i),
            6 => take(&mut self.views, i),
            7 => take(&mut self.sparse, i),
            8 => take(&mut self.tokens, i),
            _ => {
                // A pool with images or buffers alive, or the whole streamer.
                if input.bool() {
                    self.tiles = None;
                } else {
                    self.stream = None;
                }
            }
        }
    }

    fn buffer_access(&mut self, input: &mut Input<'_>) {
        if self.buffers.is_empty() {
            return;
        }
        let i = input.below(self.buffers.len() as u64) as usize;
        let offset = input.size();
        let len = input.below(512) as usize;
        if input.bool() {
            let data = vec![input.u8(); len];
            let r = self.buffers[i].write(offset, &data);
            self.note(r);
        } else {
            let mut out = vec![0u8; len];
            let r = self.buffers[i].read(offset, &mut out);
            self.note(r);
        }
    }

    fn context(&mut self, device: usize) -> usize {
        if let Some(i) = self.contexts.iter().position(|c| c.device == device) {
            return i;
        }
        self.new_context(device)
    }

    fn new_context(&mut self, device: usize) -> usize {
        let name = self.name("context");
        let ctx = CommandContext::new(&self.devices[device], &name).expect("a command context");
        self.calls += 1;
        self.contexts.push(Context { ctx, device });
        self.contexts.len() - 1
    }

    /// A context: two on device 0, one on device 1 (made on first use).
    fn pick_context(&mut self, input: &mut Input<'_>) -> usize {
        match input.u8() % 3 {
            0 => self.context(0),
            1 => {
                let on0 = self.contexts.iter().filter(|c| c.device == 0).count();
                if on0 < 2 {
                    self.context(0);
                    self.new_context(0)
                } else {
                    self.contexts.iter().rposition(|c| c.device == 0).unwrap_or(0)
                }
            }
            _ => {
                let d = (self.devices.len() - 1).min(1);
                self.context(d)
            }
        }
    }

    fn fill_program(&mut self) -> Option<&ComputeProgram> {
        if self.fill.is_none() {
            let r = ComputeProgram::new(&self.devices[0], "fuzz fill", &shaders::FILL, 4);
            self.fill = self.note(r);
        }
        self.fill.as_ref()
    }

    fn submit(&mut self, input: &mut Input<'_>) {
        let c = self.pick_context(input);
        let commands = 1 + input.below(4) as usize;
        // Decode the commands first (they borrow the world's objects inside the closure).
        #[derive(Clone, Copy)]
        enum Cmd {
            Copy { a: usize, ao: u64, b: usize, bo: u64, size: u64 },
            Fill { a: usize, o: u64, size: u64, word: u32 },
            Update { a: usize, o: u64, len: usize },
            Barrier,
            Dispatch { a: usize, count: u32, groups: [u32; 3] },
        }
        let n = self.buffers.len().max(1) as u64;
        let mut cmds = Vec::new();
        for _ in 0..commands {
            cmds.push(match input.u8() % 5 {
                0 => Cmd::Copy {
                    a: input.below(n) as usize,
                    ao: input.size(),
                    b: input.below(n) as usize,
                    bo: input.size(),
                    size: input.size(),
                },
                1 => Cmd::Fill {
                    a: input.below(n) as usize,
                    o: input.size() & !3,
                    size: input.size(),
                    word: input.u32(),
                },
                2 => Cmd::Update {
                    a: input.below(n) as usize,
                    o: input.size(),
                    len: input.below(300) as usize,
                },
                3 => Cmd::Barrier,
                _ => Cmd::Dispatch {
                    a: input.below(n) as usize,
                    count: extreme_u32(input),
                    groups: [extreme_u32(input), 1 + input.below(2) as u32, 1],
                },
            });
        }
        // The offsets of fills and updates whose sum with the buffer's own offset wraps.
        for cmd in &mut cmds {
            let (Cmd::Fill { a, o, .. } | Cmd::Update { a, o, .. }) = cmd else { continue };
            let base = self.buffers.get(*a).map_or(0, Buffer::offset);
            if base.checked_add(*o).is_none() && !self.allow(Class::TransferOffsetWrap) {
                *o = 0;
            }
        }
        let waits: Vec<_> = if input.bool() && !self.tokens.is_empty() {
            let t = input.below(self.tokens.len() as u64) as usize;
            vec![self.tokens[t].submission.gpu_use()]
        } else {
            Vec::new()
        };
        // The fill program's sets, made before recording.
        let mut sets = Vec::new();
        if cmds.iter().any(|c| matches!(c, Cmd::Dispatch { .. })) {
            self.fill_program();
        }
        for cmd in &cmds {
            let Cmd::Dispatch { a, count, .. } = *cmd else { continue };
            let (Some(buffer), Some(program)) = (self.buffers.get(a), self.fill.as_ref()) else { continue };
            let words = buffer.size() / 4;
            let over = u64::from(count) > words;
            let r = program.descriptor_set(&[Binding::Buffer(buffer)]);
            self.calls += 1;
            let Ok(set) = r else {
                self.errors += 1;
                continue;
            };
            let count = if over && !self.allow(Class::FillCount) {
                words.min(u64::from(u32::MAX)) as u32
            } else {
                count
            };
            sets.push((count, set));
        }
        let full = MemoryDependency {
            src_stages: vk::PipelineStageFlags2::ALL_COMMANDS,
            src_access: vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
            dst_stages: vk::PipelineStageFlags2::ALL_COMMANDS,
            dst_access: vk::AccessFlags2::MEMORY_READ | vk::AccessFlags2::MEMORY_WRITE,
        };
        let (mut calls, mut errors) = (0u64, 0u64);
        let buffers = &self.buffers;
        let fill = self.fill.as_ref();
        let mut set_iter = sets.iter();
        let payload: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
        let ctx = &self.contexts[c].ctx;
        let result = ctx.submit(&waits, |rec| {
            let mut count = |r: bool| {
                calls += 1;
                if !r {
                    errors += 1;
                }
            };
            for cmd in &cmds {
                // Every command after a full barrier: the fuzzer orders its own work, so a
                // hazard reported is the library's.
                count(rec.memory_barrier(full).is_ok());
                match *cmd {
                    Cmd::Copy { a, ao, b, bo, size } => {
                        if let (Some(x), Some(y)) = (buffers.get(a), buffers.get(b)) {
                            count(rec.copy_buffer(x, ao, y, bo, size).is_ok());
                        }
                    }
                    Cmd::Fill { a, o, size, word } => {
                        if let Some(x) = buffers.get(a) {
                            count(rec.fill_buffer(x, o, size, word).is_ok());
                        }
                    }
                    Cmd::Update { a, o, len } => {
                        if let Some(x) = buffers.get(a) {
                            count(rec.update_buffer(x, o, &payload[..len]).is_ok());
                        }
                    }
                    Cmd::Barrier => {}
                    Cmd::Dispatch { groups, .. } => {
                        if let (Some(program), Some((n, set))) = (fill, set_iter.next()) {
                            let mut push = Vec::new();
                            push.extend_from_slice(&n.to_le_bytes());
                            push.extend_from_slice(&0x5eed_u32.to_le_bytes());
                            count(program.dispatch(rec, set, &push, groups).is_ok());
                        }
                    }
                }
            }
        });
        self.calls += calls;
        self.errors += errors;
        if let Some(submission) = self.note(result) {
            Self::push(&mut self.tokens, Token { issuer: c, submission });
        }
        drop(sets);
    }

    fn token(&mut self, input: &mut Input<'_>) {
        if self.tokens.is_empty() {
            return;
        }
        let t = input.below(self.tokens.len() as u64) as usize;
        let mut c = self.pick_context(input);
        let issuer = self.tokens[t].issuer;
        if c != issuer && !self.allow(Class::ForeignToken) {
            c = issuer;
        }
        let ctx = &self.contexts[c].ctx;
        match input.u8() % 3 {
            0 => {
                let r = ctx.is_complete(&self.tokens[t].submission);
                self.note(r);
            }
            1 => {
                let r = ctx.wait_for(&self.tokens[t].submission);
                self.note(r);
            }
            _ => {
                let token = self.tokens.remove(t);
                let r = self.contexts[c].ctx.wait(token.submission);
                self.note(r);
            }
        }
    }

    fn format(input: &mut Input<'_>) -> Format {
        input.pick(&[
            Format::R8G8B8A8Unorm,
            Format::R8Unorm,
            Format::R32Float,
            Format::Bc1Unorm,
            Format::Bc7Unorm,
            Format::R16G16B16A16Float,
        ])
    }

    fn create_image(&mut self, input: &mut Input<'_>) {
        let device = self.device(input);
        let name = self.name("image");
        let (mut w, mut h) = (extreme_u32(input), extreme_u32(input));
        if (w > 8192 || h > 8192) && !self.allow(Class::ImageLimits) {
            (w, h) = (w.min(8192), h.min(8192));
        }
        let mut usage = ImageUsage::NONE;
        for (bit, u) in [
            ImageUsage::COPY_SRC,
            ImageUsage::COPY_DST,
            ImageUsage::SAMPLED,
            ImageUsage::STORAGE,
            ImageUsage::COLOR_ATTACHMENT,
            ImageUsage::DEPTH_STENCIL_ATTACHMENT,
        ]
        .into_iter()
        .enumerate()
        {
            if input.u8() >> (bit % 8) & 1 == 1 {
                usage = usage | u;
            }
        }
        let mut desc = ImageDesc::new_2d(name, Self::format(input), w, h, usage);
        if input.bool() {
            let mut mips = extreme_u32(input);
            let full = 32 - w.max(h).max(1).leading_zeros();
            if mips > full && !self.allow(Class::ImageMips) {
                mips = full;
            }
            desc = desc.with_mip_levels(mips);
        }
        if input.bool() {
            let mut layers = extreme_u32(input);
            // Layers × an 8192² extent at up to 16 B a texel passes `maxResourceSize` quickly.
            let bytes = u64::from(w)
                .saturating_mul(u64::from(h))
                .saturating_mul(16)
                .saturating_mul(u64::from(layers));
            if (layers > 256 || bytes > 1 << 31) && !self.allow(Class::ImageLimits) {
                layers = 1;
            }
            desc = desc.with_array_layers(layers);
        }
        if input.bool() {
            desc = desc.committed();
        }
        if let Some(i) = self.note(device.create_image(&desc)) {
            Self::push(&mut self.images, i);
        }
    }

    fn create_view(&mut self, input: &mut Input<'_>) {
        if self.images.is_empty() {
            return;
        }
        let i = input.below(self.images.len() as u64) as usize;
        let (m0, m1, l0, l1) =
            (extreme_u32(input), extreme_u32(input), extreme_u32(input), extreme_u32(input));
        let image = &self.images[i];
        let r =
            if input.bool() { image.create_view(m0..m1) } else { image.create_view_range(m0..m1, l0..l1) };
        if let Some(v) = self.note(r) {
            Self::push(&mut self.views, v);
        }
    }

    fn create_sampler(&mut self, input: &mut Input<'_>) {
        let device = self.device(input);
        let filter = input.pick(&[Filter::Nearest, Filter::Trilinear]);
        if let Some(s) = self.note(device.create_sampler(filter)) {
            Self::push(&mut self.samplers, s);
        }
    }

    fn create_sparse(&mut self, input: &mut Input<'_>) {
        if self.tiles.is_none() || input.u8() % 8 == 0 {
            let device = Arc::clone(&self.devices[0]);
            let mut desc = TilePoolDesc::default().with_name(self.name("tiles"));
            if input.bool() {
                let mut tiles = extreme_u32(input);
                if tiles > 1 << 16 && !self.allow(Class::TilesPerHeapHuge) {
                    tiles = 256;
                }
                desc = desc.with_tiles_per_heap(tiles);
            }
            if input.bool() {
                desc = desc.with_budget_tiles(extreme_u32(input));
            }
            // The images of the pool being replaced go first.
            self.sparse.clear();
            self.tiles = self.note(SparseTilePool::new(device, desc));
        }
        let name = self.name("sparse");
        let Some(pool) = self.tiles.as_ref() else { return };
        let (w, h) = match input.u8() % 4 {
            0 => (extreme_u32(input), extreme_u32(input)),
            _ => (128 << input.below(4), 128 << input.below(4)),
        };
        let huge = w > 16384 || h > 16384;
        if huge {
            self.reached.insert(Class::ImageLimits);
        }
        let (w, h) = if huge && self.skip.contains(&Class::ImageLimits) {
            (w.min(16384), h.min(16384))
        } else {
            (w, h)
        };
        let mut desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, w, h);
        if input.bool() {
            desc = desc.with_mip_levels(extreme_u32(input));
        }
        if input.bool() {
            desc = desc.with_array_layers(1 + input.below(3) as u32);
        }
        let storage = input.bool();
        let r = SparseImage::new(pool, &name, &desc, storage);
        if let Some(s) = self.note(r) {
            Self::push(&mut self.sparse, s);
        }
    }

    fn region(input: &mut Input<'_>) -> TexelRegion {
        TexelRegion {
            offset: [extreme_u32(input), extreme_u32(input), 0],
            extent: [extreme_u32(input), extreme_u32(input), 1],
        }
    }

    fn sparse_commit(&mut self, input: &mut Input<'_>) {
        let (Some(pool), false) = (self.tiles.as_ref(), self.sparse.is_empty()) else { return };
        let i = input.below(self.sparse.len() as u64) as usize;
        let (layer, mip) = (input.below(3) as u32, input.below(5) as u32);
        let region = Self::region(input);
        let image = &mut self.sparse[i];
        let r = match input.u8() % 5 {
            0 | 1 => image.commit_region(pool, layer, mip, region),
            2 => image.release_region(pool, layer, mip, region),
            3 => image.commit_tail(pool, extreme_u32(input)),
            _ => image.release_all(pool),
        };
        self.calls += 1;
        if r.is_err() {
            self.errors += 1;
        }
        if input.bool() {
            let mut images: Vec<&mut SparseImage> = self.sparse.iter_mut().collect();
            let r = pool.flush_binds(&mut images);
            self.calls += 1;
            if r.is_err() {
                self.errors += 1;
            }
        }
    }

    fn sparse_read(&mut self, input: &mut Input<'_>) {
        if self.sparse.is_empty() {
            return;
        }
        let i = input.below(self.sparse.len() as u64) as usize;
        let (layer, mip) = (input.below(3) as u32, input.below(5) as u32);
        let mut region = Self::region(input);
        let wraps = (0..3).any(|k| region.offset[k].checked_add(region.extent[k]).is_none());
        if wraps && !self.allow(Class::ReadRegionWrap) {
            region.offset = [0; 3];
        }
        let limit = input.size();
        let r = self.sparse[i].read_region(layer, mip, region, limit.min(64 << 20));
        self.note(r);
    }

    fn upload(&mut self, input: &mut Input<'_>) {
        if self.uploader.is_none() {
            let capacity = if input.bool() { input.size() } else { 1 << 16 };
            let name = self.name("uploader");
            self.uploader = self.note(Uploader::new(&self.devices[0], &name, capacity));
            return;
        }
        if self.buffers.is_empty() {
            return;
        }
        let b = input.below(self.buffers.len() as u64) as usize;
        let offset = input.size();
        let data = vec![0xa5u8; input.below(4096) as usize];
        let Some(uploader) = self.uploader.as_ref() else { return };
        let r = uploader.write_buffer(&self.buffers[b], offset, &data);
        self.calls += 1;
        if r.is_err() {
            self.errors += 1;
        }
        if input.bool() {
            let r = uploader.flush();
            self.note(r);
        }
    }

    fn read_back(&mut self, input: &mut Input<'_>) {
        if self.buffers.is_empty() {
            return;
        }
        let b = input.below(self.buffers.len() as u64) as usize;
        let (offset, len) = (input.size(), input.size().min(1 << 20));
        let device = Arc::clone(self.buffers[b].device());
        let r = device.read_back(&self.buffers[b], offset, len);
        self.note(r);
    }

    fn create_stream(&mut self, input: &mut Input<'_>) {
        let device = Arc::clone(&self.devices[0]);
        let mut budget = extreme_u32(input);
        if budget > 1 << 24 && !self.allow(Class::StreamerBudget) {
            budget = 256;
        }
        let mut desc = StreamerDesc::default()
            .with_name(self.name("streamer"))
            .with_path(input.pick(&[ResidencyPath::Hardware, ResidencyPath::Software, ResidencyPath::Auto]))
            .with_frames_in_flight(extreme_u32(input))
            .with_budget_tiles(budget)
            .with_workers(1 + input.below(2) as usize);
        if input.bool() {
            let (stride, interval) = (extreme_u32(input), extreme_u32(input));
            let extreme = stride == 0 || interval == 0 || stride > 256 || interval > 1 << 16;
            let sampling = if extreme && !self.allow(Class::FeedbackSamplingExtreme) {
                FeedbackSampling::new(2, 2)
            } else {
                FeedbackSampling::new(stride, interval)
            };
            desc = desc.with_sampling(sampling);
        }
        if input.bool() {
            desc = desc.with_staging_bytes(input.size());
        }
        self.stream = None;
        let Some(streamer) = self.note(Streamer::new(&device, desc)) else { return };
        let context = CommandContext::new(&device, "fuzz stream frames").expect("a command context");
        self.stream = Some(StreamState { streamer, textures: Vec::new(), context });
    }

    fn stream_texture(&mut self, input: &mut Input<'_>) {
        let name = self.name("vt");
        let Some(s) = self.stream.as_mut() else { return };
        if input.bool() || s.textures.is_empty() {
            if s.textures.len() >= 3 {
                return;
            }
            let side = 128u32 << input.below(3);
            let fail = input.u8() % 8 == 0;
            let desc = VtDesc::new(Format::R8G8B8A8Unorm, side, side, 128, 128);
            let seed = input.u8();
            let source: Arc<dyn TileSource> =
                Arc::new(FnSource::new(name.clone(), desc, move |mip, x, y| {
                    let (w, h) = desc.tile_extent(mip, x, y).ok_or_else(|| {
                        residency_core::streaming::SourceError::NoSuchTile {
                            source_name: "fuzz".into(),
                            mip,
                            x,
                            y,
                        }
                    })?;
                    if fail && mip == 0 {
                        return Err(residency_core::streaming::SourceError::Read {
                            source_name: "fuzz".into(),
                            reason: "a failing read".into(),
                        });
                    }
                    Ok(vec![seed ^ (mip as u8); (w * h * 4) as usize])
                }));
            let r = s.streamer.add_texture(&name, source);
            self.calls += 1;
            match r {
                Ok(t) => s.textures.push(t),
                Err(_) => self.errors += 1,
            }
        } else {
            let i = input.below(s.textures.len() as u64) as usize;
            let t = s.textures.remove(i);
            self.calls += 1;
            if input.bool() {
                if s.streamer.remove_texture(t).is_err() {
                    self.errors += 1;
                }
            } else {
                drop(t);
            }
        }
    }

    fn stream_frame(&mut self, input: &mut Input<'_>) {
        let Some(s) = self.stream.as_mut() else { return };
        if input.u8() % 8 == 0 {
            s.streamer.set_budget_tiles(extreme_u32(input));
            self.calls += 1;
        }
        let wanted = input.below(6);
        let picks: Vec<(usize, u32)> = (0..wanted).map(|_| (input.below(4) as usize, input.u32())).collect();
        let wait_loads = input.bool();
        // The units asked for, by texture id, resolved before the frame borrows the streamer.
        let asked: Vec<_> = picks
            .iter()
            .filter_map(|&(t, unit)| {
                let texture = s.textures.get(t)?;
                let count = s.streamer.manager().residency(texture.id())?.layout().tile_count();
                (count > 0).then(|| (texture.id(), residency_core::tiles::TileIndex(unit % count)))
            })
            .collect();
        self.calls += 1;
        let bindings = match s.streamer.begin_frame() {
            Ok(b) => b,
            Err(_) => {
                self.errors += 1;
                return;
            }
        };
        let records = bindings.layout.map(|layout| {
            let mut records = FeedbackBuffer::new(layout, bindings.frame);
            for &(id, key) in &asked {
                let Some(slot) = layout.slot_of(id) else { continue };
                records.record(layout, slot, key, residency_core::streaming::RequestKind::Miss);
            }
            records
        });
        drop(bindings);
        if let Some(records) = records {
            self.calls += 1;
            if s.streamer.write_cpu_feedback(&records).is_err() {
                self.errors += 1;
            }
        }
        self.calls += 1;
        let Ok(bindings) = s.streamer.frame_bindings() else {
            self.errors += 1;
            return;
        };
        let mut recorded = Ok(());
        let submission = s.context.submit(&[], |rec| recorded = bindings.record(rec, |_| ()).map(|_| ()));
        drop(bindings);
        self.calls += 1;
        match (submission, recorded) {
            (Ok(submission), Ok(())) => {
                self.calls += 1;
                if s.streamer.end_frame(submission.gpu_use()).is_err() {
                    self.errors += 1;
                }
            }
            (Ok(submission), Err(_)) => {
                self.errors += 1;
                let _ = s.streamer.end_frame(submission.gpu_use());
            }
            (Err(_), _) => self.errors += 1,
        }
        if wait_loads {
            s.streamer.wait_for_loads();
        }
    }

    fn transient_frame(&mut self, input: &mut Input<'_>) {
        if self.transient.is_none() {
            let name = self.name("transient");
            self.transient = self.note(TransientPool::new(Arc::clone(&self.devices[0]), &name));
            return;
        }
        let n = 1 + input.below(4) as usize;
        let mut requests = Vec::new();
        for i in 0..n {
            let first = input.below(4) as u32;
            let last = first + input.below(4) as u32;
            requests.push(TransientRequest::Buffer {
                name: format!("fuzz transient {i}"),
                size: input.size(),
                usage: Self::usage(input),
                passes: first..=last,
                uses: (Use::TransferDst, Use::TransferSrc),
            });
        }
        let Some(pool) = self.transient.as_mut() else { return };
        self.calls += 1;
        let frame = match pool.begin_frame(&requests) {
            Ok(f) => f,
            Err(_) => {
                self.errors += 1;
                return;
            }
        };
        // A copy between two of the frame's buffers (they may alias).
        if let (Some(a), Some(b)) = (frame.buffer(0), frame.buffer(input.below(n as u64) as usize)) {
            // Two buffers whose bytes overlap in one memory object (the same buffer is the
            // library's own overlap check, not an alias).
            let ((ma, oa), (mb, ob)) = (a.memory(), b.memory());
            let aliased = ma == mb
                && a.raw() != b.raw()
                && oa < ob.saturating_add(b.size())
                && ob < oa.saturating_add(a.size());
            if !aliased || self.skip.iter().all(|&c| c != Class::AliasedCopy) {
                if aliased {
                    self.reached.insert(Class::AliasedCopy);
                }
                let ctx = self.context(0);
                let size = a.size().min(b.size()).min(256);
                let ctx = &self.contexts[ctx].ctx;
                let r = ctx.submit(&[], |rec| {
                    let _ = rec.copy_buffer(a, 0, b, 0, size);
                });
                self.calls += 1;
                if let Ok(s) = r {
                    let _ = ctx.wait(s);
                } else {
                    self.errors += 1;
                }
            } else {
                self.reached.insert(Class::AliasedCopy);
            }
        }
        let Some(pool) = self.transient.as_mut() else { return };
        pool.end_frame(frame);
    }

    /// Drops everything in an order a renderer might: tokens waited for by their issuers first
    /// (a renderer keeps its frames' tokens), then the objects.
    fn teardown(&mut self) {
        for token in std::mem::take(&mut self.tokens) {
            let _ = self.contexts[token.issuer].ctx.wait(token.submission);
        }
        if let Some(s) = self.stream.take() {
            let StreamState { mut streamer, textures, context } = s;
            for t in textures {
                let _ = streamer.remove_texture(t);
            }
            drop(streamer);
            drop(context);
        }
        self.sparse.clear();
        self.tiles = None;
        self.views.clear();
        self.samplers.clear();
        self.images.clear();
        self.buffers.clear();
        self.fill = None;
        self.uploader = None;
        self.pools.clear();
        self.linear.clear();
        self.transient = None;
        self.contexts.clear();
        let _ = self.set;
    }
}
