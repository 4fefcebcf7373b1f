//! Device indices and 32-bit device masks.
//!
//! Every object the library creates knows the index of the device it lives on from the start, so the
//! multi-device layer wraps per-device objects instead of retrofitting them. A [`DeviceMask`] names a
//! set of devices: bit *i* is the device of index *i*. Bits for devices that do not exist are
//! ignored, so [`DeviceMask::ALL`] means "every device there is", whatever their number.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Largest number of devices a mask can name.
pub const MAX_DEVICES: u32 = 32;

/// The index of one device in a device set (0 is the default device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeviceIndex(u8);

impl DeviceIndex {
    /// The default device.
    pub const DEFAULT: DeviceIndex = DeviceIndex(0);

    /// The device of index `index`, or `None` when it is beyond [`MAX_DEVICES`].
    pub const fn new(index: u32) -> Option<DeviceIndex> {
        if index < MAX_DEVICES {
            Some(DeviceIndex(index as u8))
        } else {
            None
        }
    }

    /// The index as a number.
    pub const fn get(self) -> u32 {
        self.0 as u32
    }

    /// A mask holding only this device.
    pub const fn mask(self) -> DeviceMask {
        DeviceMask(1 << self.0)
    }
}

impl fmt::Display for DeviceIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.0)
    }
}

/// A set of devices, one bit per device index.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeviceMask(u32);

impl DeviceMask {
    /// No device.
    pub const NONE: DeviceMask = DeviceMask(0);
    /// Every device that exists (all 32 bits set; missing devices are ignored).
    pub const ALL: DeviceMask = DeviceMask(u32::MAX);
    /// Only the default device (index 0).
    pub const DEFAULT: DeviceMask = DeviceMask(1);

    /// A mask from raw bits.
    pub const fn from_bits(bits: u32) -> DeviceMask {
        DeviceMask(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether `index` is in the mask.
    pub const fn contains(self, index: DeviceIndex) -> bool {
        self.0 & (1 << index.0) != 0
    }

    /// Whether every device of `other` is in `self`.
    pub const fn is_superset_of(self, other: DeviceMask) -> bool {
        other.0 & !self.0 == 0
    }

    /// The devices in both masks.
    pub const fn intersection(self, other: DeviceMask) -> DeviceMask {
        DeviceMask(self.0 & other.0)
    }

    /// The devices in either mask.
    pub const fn union(self, other: DeviceMask) -> DeviceMask {
        DeviceMask(self.0 | other.0)
    }

    /// The devices in `self` but not in `other`.
    pub const fn difference(self, other: DeviceMask) -> DeviceMask {
        DeviceMask(self.0 & !other.0)
    }

    /// Whether the mask names no device.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The mask of the first `count` devices: what [`DeviceMask::ALL`] means on a set of that size.
    pub const fn first(count: u32) -> DeviceMask {
        if count >= MAX_DEVICES {
            DeviceMask::ALL
        } else {
            DeviceMask((1u32 << count) - 1)
        }
    }

    /// The devices of this mask that exist in a set of `count` devices.
    pub const fn restricted_to(self, count: u32) -> DeviceMask {
        self.intersection(DeviceMask::first(count))
    }

    /// The indices in the mask, lowest first.
    pub fn iter(self) -> impl Iterator<Item = DeviceIndex> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let index = bits.trailing_zeros();
            bits &= bits - 1;
            Some(DeviceIndex(index as u8))
        })
    }

    /// How many devices the mask names.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }
}

impl FromIterator<DeviceIndex> for DeviceMask {
    fn from_iter<I: IntoIterator<Item = DeviceIndex>>(iter: I) -> Self {
        iter.into_iter().fold(DeviceMask::NONE, |mask, index| mask.union(index.mask()))
    }
}

impl fmt::Debug for DeviceMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceMask({:#b})", self.0)
    }
}

/// A `--devices` argument that is not `all`, a comma list of indices, or a mask.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid device selection `{0}`: expected `all`, a list such as `0,1`, or a mask such as `0b11` / `0x3`"
)]
pub struct InvalidDeviceSelection(pub String);

impl std::str::FromStr for DeviceMask {
    type Err = InvalidDeviceSelection;

    /// Parses `all`, `0,1` (indices), `0b11` or `0x3` (masks).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidDeviceSelection(text.to_owned());
        let t = text.trim();
        if t.eq_ignore_ascii_case("all") {
            return Ok(DeviceMask::ALL);
        }
        if let Some(bits) = t.strip_prefix("0b") {
            return u32::from_str_radix(bits, 2).map(DeviceMask).map_err(|_| bad());
        }
        if let Some(bits) = t.strip_prefix("0x") {
            return u32::from_str_radix(bits, 16).map(DeviceMask).map_err(|_| bad());
        }
        t.split(',')
            .map(|part| part.trim().parse::<u32>().ok().and_then(DeviceIndex::new).ok_or_else(bad))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(i: u32) -> DeviceIndex {
        DeviceIndex::new(i).unwrap()
    }

    #[test]
    fn iteration_yields_set_bits_in_order() {
        let mask = DeviceMask::from_bits(0b1010_0101);
        assert_eq!(mask.iter().map(DeviceIndex::get).collect::<Vec<_>>(), vec![0, 2, 5, 7]);
        assert_eq!(mask.count(), 4);
    }

    #[test]
    fn all_restricted_to_existing_devices() {
        assert_eq!(DeviceMask::ALL.restricted_to(2), DeviceMask::from_bits(0b11));
        assert_eq!(DeviceMask::ALL.restricted_to(32), DeviceMask::ALL);
        assert_eq!(DeviceMask::DEFAULT.iter().collect::<Vec<_>>(), vec![DeviceIndex::DEFAULT]);
    }

    #[test]
    fn index_beyond_32_is_rejected() {
        assert!(DeviceIndex::new(32).is_none());
        assert_eq!(idx(31).mask().bits(), 1 << 31);
    }

    #[test]
    fn parse_selections() {
        assert_eq!("all".parse::<DeviceMask>().unwrap(), DeviceMask::ALL);
        assert_eq!("0,1".parse::<DeviceMask>().unwrap(), DeviceMask::from_bits(0b11));
        assert_eq!("1".parse::<DeviceMask>().unwrap(), DeviceMask::from_bits(0b10));
        assert_eq!("0b101".parse::<DeviceMask>().unwrap(), DeviceMask::from_bits(0b101));
        assert_eq!("0x3".parse::<DeviceMask>().unwrap(), DeviceMask::from_bits(3));
        assert!("two".parse::<DeviceMask>().is_err());
        assert!("40".parse::<DeviceMask>().is_err());
    }

    #[test]
    fn set_algebra() {
        let a = DeviceMask::from_bits(0b0110);
        let b = DeviceMask::from_bits(0b0011);
        assert_eq!(a.intersection(b).bits(), 0b0010);
        assert_eq!(a.union(b).bits(), 0b0111);
        assert_eq!(a.difference(b).bits(), 0b0100);
        assert!(a.union(b).is_superset_of(a));
        assert!(!a.is_superset_of(b));
    }
}
