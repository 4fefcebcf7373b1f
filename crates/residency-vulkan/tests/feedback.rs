//! Shader feedback on the GPU: a known view's samples request exactly the tiles the CPU model says.

use residency_core::format::Format;
use residency_core::memory::MemoryIntent;
use residency_core::streaming::{classify_sample, FeedbackBuffer, FeedbackDesc, FeedbackLayout, RequestKind};
use residency_core::tiles::{ImageId, SparseImageDesc, SparseImageLayout};
use residency_core::usage::BufferUsage;
use residency_vulkan::compute::{Binding, ComputeProgram};
use residency_vulkan::shaders::{self};
use residency_vulkan::testing::with_gpu;
use residency_vulkan::BufferDesc;

fn words_to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn a_known_view_requests_exactly_the_expected_tiles() {
    with_gpu(|set| {
        let device = &set.devices()[0];
        let desc = SparseImageDesc::new_2d(Format::R8G8B8A8Unorm, 16384, 16384);
        let layout = SparseImageLayout::for_device(&desc, device.profile()).unwrap();
        let id = ImageId(7);
        let mut feedback = FeedbackLayout::new(FeedbackDesc::default(), &[(id, &layout)]).unwrap();
        assert!(feedback.set_lod_warning(id, 8, 64));

        // A camera over part of the texture: 32 × 32 pixels at mip-0 texel centres, LODs 0.1–3.1;
        // a third of them see their own mip resident (min-LOD = that mip: LOD warnings), the rest
        // nothing resident (misses).
        let samples = residency_vulkan::testing::known_feedback_view();
        let frame = 42;
        let mut expected = FeedbackBuffer::new(&feedback, frame);
        let image = &feedback.images()[0];
        for s in &samples {
            if let Some((tile, kind)) = classify_sample(image, 0, [s[0], s[1], 0.0], s[2], s[3] as u8) {
                expected.record(&feedback, 0, tile, kind);
            }
        }

        let bytes = feedback.buffer_bytes();
        let mut fb = device
            .create_buffer(
                &BufferDesc::new("feedback", bytes, BufferUsage::STORAGE).with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let mut initial = vec![0u32; (bytes / 4) as usize];
        initial[..4].copy_from_slice(&feedback.header_words(frame));
        fb.write(0, &words_to_bytes(&initial)).unwrap();
        let table_words = feedback.image_table();
        let mut table = device
            .create_buffer(
                &BufferDesc::new("image table", table_words.len() as u64 * 4, BufferUsage::STORAGE)
                    .with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        table.write(0, &words_to_bytes(&table_words)).unwrap();
        let mut input = device
            .create_buffer(
                &BufferDesc::new("samples", samples.len() as u64 * 16, BufferUsage::STORAGE)
                    .with_intent(MemoryIntent::Upload),
            )
            .unwrap();
        input.write(0, &samples.iter().flatten().flat_map(|f| f.to_le_bytes()).collect::<Vec<_>>()).unwrap();

        let program = ComputeProgram::new(device, "feedback_view.comp", &shaders::FEEDBACK_VIEW, 1).unwrap();
        let ds = program
            .descriptor_set(&[Binding::Buffer(&fb), Binding::Buffer(&table), Binding::Buffer(&input)])
            .unwrap();
        device
            .submit_compute("feedback view", |rec| {
                program
                    .dispatch(
                        rec,
                        &ds,
                        &(samples.len() as u32).to_le_bytes(),
                        [(samples.len() as u32).div_ceil(64), 1, 1],
                    )
                    .expect("a few workgroups, 4 declared push-constant bytes");
            })
            .unwrap();
        let mut gpu = vec![0u8; bytes as usize];
        fb.read(0, &mut gpu).unwrap();

        let from_gpu = feedback.decode(&gpu, frame).unwrap();
        let from_cpu = feedback.decode(&expected.bytes(), frame).unwrap();
        assert!(!from_cpu.requests.is_empty());
        assert!(from_cpu.requests.iter().any(|r| r.kind == RequestKind::Miss));
        assert!(from_cpu.requests.iter().any(|r| r.kind == RequestKind::LodWarning));
        assert_eq!(
            from_gpu.requests, from_cpu.requests,
            "the GPU requested exactly the CPU model's tiles, with its pixel counts"
        );
        assert_eq!(from_gpu.records, from_cpu.records);
        assert!(!from_gpu.overflowed);

        drop(program);
        for b in [fb, table, input] {
            drop(b);
        }
    });
}

#[test]
fn the_glsl_sampling_rule_matches_the_cpu_rule() {
    use residency_core::streaming::FeedbackSampling;
    with_gpu(|set| {
        let device = &set.devices()[0];
        let (w, h) = (24u32, 16u32);
        let out = device
            .create_buffer(
                &BufferDesc::new("pixel writes", u64::from(w * h) * 4, BufferUsage::STORAGE)
                    .with_intent(MemoryIntent::Readback),
            )
            .unwrap();
        let program =
            ComputeProgram::new(device, "feedback_sampling.comp", &shaders::FEEDBACK_SAMPLING, 1).unwrap();
        let ds = program
            .descriptor_set(&[Binding::Buffer(&out), Binding::Buffer(&out), Binding::Buffer(&out)])
            .unwrap();
        let mut checked = 0;
        for (stride, interval) in [(1, 1), (2, 1), (3, 2), (4, 3)] {
            let rule = FeedbackSampling::new(stride, interval);
            for frame in 0..20u64 {
                let push: Vec<u8> =
                    [frame as u32, stride, interval, w].iter().flat_map(|v| v.to_le_bytes()).collect();
                device
                    .submit_compute("feedback sampling", |rec| {
                        program
                            .dispatch(rec, &ds, &push, [w / 8, h / 8, 1])
                            .expect("a small grid within the declared push constants");
                    })
                    .unwrap();
                let mut bytes = vec![0u8; (w * h * 4) as usize];
                out.read(0, &mut bytes).unwrap();
                let mut writing = 0;
                for y in 0..h {
                    for x in 0..w {
                        let i = ((y * w + x) * 4) as usize;
                        let gpu = u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) == 1;
                        assert_eq!(
                            gpu,
                            rule.pixel_writes(x, y, frame),
                            "pixel ({x}, {y}) frame {frame} {rule:?}"
                        );
                        writing += u32::from(gpu);
                    }
                }
                // Active frames sample one pixel per stride² block; the others none.
                let expected =
                    if rule.frame_active(frame) { u64::from(w * h) / rule.pixel_weight() } else { 0 };
                if w % stride == 0 && h % stride == 0 {
                    assert_eq!(u64::from(writing), expected, "frame {frame} {rule:?}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 80);
        drop(program);
        drop(out);
    });
}
