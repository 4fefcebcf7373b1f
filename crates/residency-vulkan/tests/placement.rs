//! The tight-placement engine fed by the live device agrees with the same device's profile.

use residency_core::format::Format;
use residency_core::placement::RequirementsSource;
use residency_core::placement::{
    allocation_info, AllocationInfo, Placement, ResourceDesc, ResourceFlag, TightAlignmentTier,
};
use residency_core::profile::DeviceProfile;
use residency_vulkan::testing::with_gpu;

fn descs() -> Vec<ResourceDesc> {
    let mut descs = Vec::new();
    for size in [1u64, 8, 16, 100, 255, 256, 4096, 65_537, 1 << 20, 3 << 20] {
        descs.push(ResourceDesc::buffer(size));
        descs.push(ResourceDesc::buffer(size).tight());
        descs.push(ResourceDesc::buffer(size).tight().with_flag(ResourceFlag::AllowUnorderedAccess));
        descs.push(ResourceDesc::buffer(size).tight().with_alignment(256));
    }
    for format in [Format::R8G8B8A8Unorm, Format::Bc7Unorm, Format::R32G32B32A32Float] {
        let textures = [
            ResourceDesc::texture_2d(format, 1, 1).with_mip_levels(1),
            ResourceDesc::texture_2d(format, 64, 64).with_mip_levels(1),
            ResourceDesc::texture_2d(format, 256, 256).with_mip_levels(9),
            ResourceDesc::texture_2d(format, 1024, 1024).with_mip_levels(11),
            ResourceDesc::texture_2d(format, 4096, 4096).with_mip_levels(1),
            ResourceDesc::texture_2d(format, 256, 256).with_mip_levels(9).with_depth_or_array_size(6),
        ];
        for t in textures {
            descs.push(t);
            descs.push(t.tight());
        }
    }
    descs
}

fn same(live: &AllocationInfo, profile: &AllocationInfo) -> bool {
    live.size == profile.size
        && live.alignment == profile.alignment
        && live.elements.len() == profile.elements.len()
        && live
            .elements
            .iter()
            .zip(&profile.elements)
            .all(|(a, b)| (a.offset, a.size, a.alignment) == (b.offset, b.size, b.alignment))
}

fn compare(source_a: &dyn RequirementsSource, source_b: &dyn RequirementsSource, what: &str) {
    assert_eq!(source_a.tight_alignment_tier(), source_b.tight_alignment_tier(), "{what}: tier");
    let all = descs();
    let mut answered = 0;
    for placement in [Placement::Placed, Placement::Committed] {
        for desc in &all {
            let (mut ma, mut mb) = (Vec::new(), Vec::new());
            let a = allocation_info(source_a, placement, std::slice::from_ref(desc), &mut ma);
            let b = allocation_info(source_b, placement, std::slice::from_ref(desc), &mut mb);
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert!(!b.elements[0].details.estimated, "{what}: {desc:?} was estimated");
                    assert!(same(&a, &b), "{what}: {placement:?} {desc:?}\nlive {a:?}\nprofile {b:?}");
                    answered += 1;
                }
                (Err(a), Err(b)) => assert_eq!(a.id(), b.id(), "{what}: {desc:?}"),
                (a, b) => panic!("{what}: {placement:?} {desc:?}: {a:?} vs {b:?}"),
            }
        }
        // The array rule over the whole list at once.
        let tight: Vec<_> = all.iter().copied().filter(|d| d.is_tight()).collect();
        let a = allocation_info(source_a, placement, &tight, &mut Vec::new()).unwrap();
        let b = allocation_info(source_b, placement, &tight, &mut Vec::new()).unwrap();
        assert!(same(&a, &b), "{what}: array of {} descriptions", tight.len());
    }
    // Every description is valid on lavapipe and the H200: all must have been answered.
    assert_eq!(answered, 2 * all.len(), "{what}: some descriptions were refused");
}

#[test]
fn live_device_and_its_profile_give_the_same_allocation_info() {
    with_gpu(|set| {
        for device in set.devices() {
            let live: &residency_vulkan::Device = device;
            let profile = DeviceProfile::from_json(&device.profile().to_json()).unwrap();
            compare(&live, &profile, &device.profile().identity.name);
            assert_eq!(live.tight_alignment_tier(), TightAlignmentTier::Tier1, "{}", device.name());
        }
    });
}

#[test]
fn live_lavapipe_and_the_checked_in_lavapipe_profile_agree() {
    with_gpu(|set| {
        let checked_in = DeviceProfile::from_json(residency_core::profile::captured::LAVAPIPE_JSON).unwrap();
        let Some(device) = set.devices().iter().find(|d| {
            let live = &d.profile().identity;
            live.driver_info == checked_in.identity.driver_info && live.name == checked_in.identity.name
        }) else {
            eprintln!(
                "**** no device matches residency-core's profiles/lavapipe.json ({}); nothing to compare ****",
                checked_in.identity.driver_info
            );
            return;
        };
        let live: &residency_vulkan::Device = device;
        compare(&live, &checked_in, "checked-in lavapipe profile");
    });
}
