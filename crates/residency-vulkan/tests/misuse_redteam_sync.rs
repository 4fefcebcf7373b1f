//! What the synchronisation-and-frames red team broke (issue #29 follow-up), each fixed at its
//! cause and kept here as a `misuse_*` test that failed on the code before the fix:
//! - an offset near `u64::MAX` into a pooled buffer made `fill_buffer` / `update_buffer` panic
//!   (`attempt to add with overflow` in the alignment check, which ran before the range check);
//! - a second `TransientPool::begin_frame` while the first frame was open placed the new frame
//!   over the bytes of the open one: writing the second frame's buffer silently overwrote the
//!   first frame's live buffer;
//! - `FrameBindings::record` called again from inside its own `draw` closure was accepted (the
//!   "recorded" flag was raised only at the end): the frame was recorded twice, and the nested
//!   call took the uploader's copies away from what `abandon_frame` queues again.
//!
//! Each runs under synchronization validation and the leak check; scenarios that could hang run
//! under the watchdog.

#![forbid(unsafe_code)]

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{FnSource, TileSource};
use residency_core::sync::Use;
use residency_core::usage::{BufferPoolUsage, BufferUsage};
use residency_core::vt_file::VtDesc;
use residency_vulkan::recording::CopyError;
use residency_vulkan::streaming::{StreamError, Streamer, StreamerDesc};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::transient::{TransientPool, TransientRequest};
use residency_vulkan::{BufferInit, BufferPool, BufferPoolDesc, CommandContext, MemoryError};
use std::sync::Arc;

#[path = "common/watchdog.rs"]
mod watchdog;

/// On the old code: a panic (`attempt to add with overflow`) in `check_transfer_write`.
#[test]
fn misuse_fills_and_updates_at_extreme_offsets_of_a_pooled_buffer_are_typed_errors() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let pool = BufferPool::new(
            Arc::clone(device),
            BufferPoolDesc::new("misuse redteam pool", BufferPoolUsage::Known(BufferUsage::COPY_DST))
                .with_memory(MemoryIntent::DeviceLocal),
        )
        .unwrap();
        let _first = pool.init_buffer(&BufferInit::new("misuse redteam pooled a", 256)).unwrap();
        let second = pool.init_buffer(&BufferInit::new("misuse redteam pooled b", 256)).unwrap();
        assert!(second.offset() >= 4, "inside the page: {}", second.offset());
        device
            .submit_once("misuse redteam extreme fill", |rec| {
                for offset in [u64::MAX - 3, u64::MAX - 7, 1 << 63, 256] {
                    let fill = rec.fill_buffer(&second, offset, 4, 1).unwrap_err();
                    assert!(matches!(fill, CopyError::Invalid { .. }), "{fill:?}");
                    let update = rec.update_buffer(&second, offset, &[0; 4]).unwrap_err();
                    assert!(matches!(update, CopyError::Invalid { .. }), "{update:?}");
                }
                assert_eq!(rec.helper_commands(), 0, "nothing recorded");
                // The checks still pass what is valid.
                rec.fill_buffer(&second, 252, 4, 1).unwrap();
            })
            .unwrap();
    });
}

fn transient(name: &str) -> TransientRequest {
    TransientRequest::Buffer {
        name: name.into(),
        size: 4096,
        usage: BufferUsage::COPY_DST | BufferUsage::COPY_SRC,
        passes: 0..=0,
        uses: (Use::TransferDst, Use::TransferSrc),
    }
}

/// On the old code: the second frame's buffer lay over the open first frame's, and filling it
/// overwrote the first frame's contents (read back 0x2222_2222 instead of 0x1111_1111).
#[test]
fn misuse_a_second_transient_frame_while_the_first_is_open_is_refused() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let mut pool = TransientPool::new(Arc::clone(device), "misuse redteam open frames").unwrap();
        let ctx = CommandContext::new(device, "misuse redteam open frames").unwrap();
        let first = pool.begin_frame(&[transient("misuse redteam first")]).unwrap();
        let s = ctx
            .submit(&[], |rec| {
                pool.record_pass_start(rec, &first, 0).unwrap();
                rec.fill_buffer(first.buffer(0).unwrap(), 0, 4096, 0x1111_1111).unwrap();
            })
            .unwrap();
        ctx.wait(s).unwrap();
        let heap = pool.heap_bytes();
        let objects = device.ledger().live_objects().len();
        let refused = pool.begin_frame(&[transient("misuse redteam second")]).unwrap_err();
        assert!(matches!(refused, MemoryError::Unsatisfiable { .. }), "{refused:?}");
        assert_eq!(
            (pool.heap_bytes(), device.ledger().live_objects().len()),
            (heap, objects),
            "nothing made"
        );
        let bytes = device.read_back(first.buffer(0).unwrap(), 0, 4).unwrap();
        assert_eq!(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]), 0x1111_1111);
        // Ended (or dropped), the next frame begins, in the same bytes.
        pool.end_frame(first);
        let second = pool.begin_frame(&[transient("misuse redteam second")]).unwrap();
        drop(second);
        let third = pool.begin_frame(&[transient("misuse redteam third")]).unwrap();
        let s = ctx
            .submit(&[], |rec| {
                pool.record_pass_start(rec, &third, 0).unwrap();
                rec.fill_buffer(third.buffer(0).unwrap(), 0, 4096, 0x3333_3333).unwrap();
            })
            .unwrap();
        pool.end_frame(third);
        ctx.wait(s).unwrap();
    });
}

fn source(name: &str) -> Arc<dyn TileSource> {
    let desc = VtDesc::new(Format::R8G8B8A8Unorm, 512, 512, 128, 128);
    Arc::new(FnSource::new(name, desc, move |mip, x, y| {
        let (w, h) = desc.tile_extent(mip, x, y).expect("in the grid");
        Ok(vec![(mip * 31 + x * 7 + y) as u8; (w * h * 4) as usize])
    }))
}

/// On the old code: the nested `record` returned `Ok` (the frame was recorded twice, the second
/// time without the copies, which it took away from `abandon_frame`'s requeue).
#[test]
fn misuse_a_frame_recorded_again_from_inside_its_own_draw_is_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("nested record", move || {
            let desc = StreamerDesc::default().with_name("misuse redteam nested").with_budget_tiles(64);
            let mut s = Streamer::new(&device, desc.with_workers(1)).unwrap();
            let texture = s.add_texture("misuse redteam nested", source("nested")).unwrap();
            let ctx = CommandContext::new(&device, "misuse redteam nested").unwrap();
            let other = CommandContext::new(&device, "misuse redteam nested other").unwrap();
            let bindings = s.begin_frame().unwrap();
            let (mut same, mut another) = (None, None);
            let sub = ctx
                .submit(&[], |rec| {
                    bindings
                        .record(rec, |rec| {
                            same = Some(bindings.record(rec, |_| ()));
                            let s = other.submit(&[], |inner| another = Some(bindings.record(inner, |_| ())));
                            other.wait(s.unwrap()).unwrap();
                        })
                        .unwrap();
                })
                .unwrap();
            assert!(matches!(same, Some(Err(StreamError::FrameOrder(_)))), "{same:?}");
            assert!(matches!(another, Some(Err(StreamError::FrameOrder(_)))), "{another:?}");
            // Recorded once: a third record after it is refused as before.
            let again = ctx.submit(&[], |rec| assert!(bindings.record(rec, |_| ()).is_err())).unwrap();
            drop(bindings);
            s.end_frame(sub.gpu_use()).unwrap();
            ctx.wait(sub).unwrap();
            ctx.wait(again).unwrap();
            // The protocol goes on.
            let bindings = s.begin_frame().unwrap();
            let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            s.end_frame(sub.gpu_use()).unwrap();
            ctx.wait(sub).unwrap();
            s.remove_texture(texture).unwrap();
        })
    });
}

/// `end_frame` with the use of a residency submission made before the frame's own (found by the
/// red team; wrong results, not a crash: the frame's feedback would be read, and tiles it samples
/// unbound, while it still runs). Refused now; the frame's own submission is accepted.
#[test]
fn misuse_end_frame_with_a_use_that_ends_before_the_frames_submission_is_refused() {
    with_gpu(|set| {
        let device = Arc::clone(&set.devices()[0]);
        watchdog::within("early end_frame", move || {
            let desc = StreamerDesc::default().with_name("misuse redteam early").with_budget_tiles(64);
            let mut s = Streamer::new(&device, desc.with_workers(1)).unwrap();
            let texture = s.add_texture("misuse redteam early", source("early")).unwrap();
            let ctx = CommandContext::new(&device, "misuse redteam early").unwrap();
            let earlier = ctx.submit(&[], |_| {}).unwrap();
            let bindings = s.begin_frame().unwrap();
            let sub = ctx.submit(&[], |rec| bindings.record(rec, |_| ()).unwrap()).unwrap();
            drop(bindings);
            let refused = s.end_frame(earlier.gpu_use()).unwrap_err();
            assert!(matches!(refused, StreamError::FrameOrder(_)), "{refused}");
            s.end_frame(sub.gpu_use()).unwrap();
            ctx.wait(earlier).unwrap();
            ctx.wait(sub).unwrap();
            s.remove_texture(texture).unwrap();
        })
    });
}

/// `DispatchItem::new` with fewer bindings than its program has panicked (`assert_eq!` on caller
/// input); the count is refused at submission now, with nothing submitted.
#[test]
fn misuse_a_multi_device_dispatch_with_the_wrong_binding_count_is_a_typed_error() {
    use residency_core::device_mask::{DeviceIndex, DeviceMask};
    use residency_vulkan::multi::work::{
        BufferView, DispatchItem, MultiBinding, MultiComputeProgram, MultiSubmitter, WorkItem,
    };
    use residency_vulkan::multi::MultiBufferPool;
    with_gpu(|set| {
        let both = DeviceMask::from_bits(0b11);
        let pool = MultiBufferPool::new(
            set,
            both,
            &BufferPoolDesc::new("misuse binding count", BufferPoolUsage::Unknown).with_page_size(1 << 20),
        )
        .unwrap();
        let usage = BufferUsage::STORAGE | BufferUsage::COPY_DST;
        let only =
            pool.init_buffer(&BufferInit::new("misuse only binding", 1024).with_usage(usage), both).unwrap();
        let program = MultiComputeProgram::new(
            set,
            both,
            "misuse binding count",
            &residency_vulkan::shaders::PLACED_BUFFERS,
            2,
        )
        .unwrap();
        let dispatch =
            DispatchItem::new(&program, vec![MultiBinding::Buffer(BufferView::whole(&only))], &[], [1, 1, 1]);
        let submitter = MultiSubmitter::new(set, both).unwrap();
        let refused =
            submitter.submit(DeviceIndex::new(0).unwrap(), &[WorkItem::Dispatch(&dispatch)]).unwrap_err();
        assert!(refused.to_string().contains("binding"), "{refused}");
        assert_eq!(dispatch.cached_devices(), 0);
    });
}
