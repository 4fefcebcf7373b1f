//! The device profiles `residency-core` ships (`residency_core::profile::captured`), parsed once per
//! process.

use residency_core::profile::DeviceProfile;
use std::sync::OnceLock;

/// The text of the captured H200 profile.
pub(crate) const H200_JSON: &str = residency_core::profile::captured::NVIDIA_H200_JSON;
/// The text of the captured lavapipe profile.
pub(crate) const LAVAPIPE_JSON: &str = residency_core::profile::captured::LAVAPIPE_JSON;

/// Both profiles: the H200 and lavapipe.
pub(crate) fn all() -> &'static [DeviceProfile; 2] {
    static PROFILES: OnceLock<[DeviceProfile; 2]> = OnceLock::new();
    PROFILES.get_or_init(|| {
        [H200_JSON, LAVAPIPE_JSON].map(|t| DeviceProfile::from_json(t).expect("checked-in profile parses"))
    })
}
