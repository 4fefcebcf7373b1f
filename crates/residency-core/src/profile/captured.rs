//! Profiles captured on real devices, shipped with this crate (its `profiles/` folder; how each was
//! captured is in the repository's `docs/devices/README.md`): stand-ins for those devices in offline
//! planning, benchmarks and tests on machines that do not have them.
//!
//! Each is the JSON text [`DeviceProfile::from_json`](super::DeviceProfile::from_json) reads; the
//! strings are only linked into a binary that uses them.

/// Mesa's lavapipe (llvmpipe, software Vulkan): `profiles/lavapipe.json`.
pub const LAVAPIPE_JSON: &str = include_str!("../../profiles/lavapipe.json");

/// An NVIDIA H200: `profiles/nvidia-h200.json`.
pub const NVIDIA_H200_JSON: &str = include_str!("../../profiles/nvidia-h200.json");

/// Every captured profile as (file name under this crate, JSON text), lavapipe first.
pub const ALL: [(&str, &str); 2] =
    [("profiles/lavapipe.json", LAVAPIPE_JSON), ("profiles/nvidia-h200.json", NVIDIA_H200_JSON)];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::DeviceProfile;

    #[test]
    fn every_captured_profile_parses_and_names_its_device() {
        for (file, text) in ALL {
            let profile = DeviceProfile::from_json(text).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(!profile.identity.name.is_empty(), "{file}");
        }
        assert!(DeviceProfile::from_json(NVIDIA_H200_JSON).unwrap().identity.name.contains("H200"));
        assert!(DeviceProfile::from_json(LAVAPIPE_JSON).unwrap().identity.name.contains("llvmpipe"));
    }
}
