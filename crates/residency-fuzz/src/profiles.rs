//! The checked-in device profiles (`profiles/*.json`), parsed once per process.

use residency_core::profile::DeviceProfile;
use std::sync::OnceLock;

/// The text of `profiles/nvidia-h200.json`.
pub(crate) const H200_JSON: &str = include_str!("../../../profiles/nvidia-h200.json");
/// The text of `profiles/lavapipe.json`.
pub(crate) const LAVAPIPE_JSON: &str = include_str!("../../../profiles/lavapipe.json");

/// Both profiles: the H200 and lavapipe.
pub(crate) fn all() -> &'static [DeviceProfile; 2] {
    static PROFILES: OnceLock<[DeviceProfile; 2]> = OnceLock::new();
    PROFILES.get_or_init(|| {
        [H200_JSON, LAVAPIPE_JSON].map(|t| DeviceProfile::from_json(t).expect("checked-in profile parses"))
    })
}
