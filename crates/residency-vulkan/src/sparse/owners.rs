//! The owner ids of a tile pool's images (hardware and software paths alike).

use crate::poison::PoisonFree;
use residency_core::tiles::ImageId;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// How many serials an owner id has: its low 20 bits (serial 0 is never used).
pub(crate) const OWNER_SERIALS: u32 = 1 << 20;

/// The owner ids of one tile pool's images, `pool << 20 | serial` with a serial from 1 to
/// 2^20 − 1, so that no two images that may hold tiles of the pool share one (a serial past that
/// would carry into the pool's bits and could name an earlier image's owner, whose tiles the new
/// image's drop would then free while it still holds them). A serial is taken again only after it
/// was given back: by a creation that failed before its image could hold tiles, or once the
/// image's tiles went back to the pool (`TileOwner::free_owner`, run when its garbage retires after
/// the GPU work that used it). A pool therefore makes images for as long as it lives, with at most
/// 2^20 − 1 live at once.
#[derive(Debug)]
pub(crate) struct OwnerIds {
    /// The pool's bits, `pool << 20`.
    pool: u32,
    /// The next serial never taken.
    next: AtomicU32,
    /// Serials given back.
    free: Mutex<Vec<u32>>,
}

impl OwnerIds {
    /// The ids of pool number `pool`.
    pub(crate) fn new(pool: u32) -> OwnerIds {
        OwnerIds { pool: pool << 20, next: AtomicU32::new(1), free: Mutex::new(Vec::new()) }
    }

    /// An owner id no live image of the pool has; `None` when 2^20 − 1 are taken.
    pub(crate) fn take(&self) -> Option<ImageId> {
        let serial = match self.free.locked().pop() {
            Some(serial) => serial,
            None => self
                .next
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < OWNER_SERIALS).then_some(n + 1))
                .ok()?,
        };
        Some(ImageId(self.pool | serial))
    }

    /// Gives back `owner`, taken from these ids, once nothing holds tiles under it: exactly once per
    /// id taken (a failed creation, or its image's tiles returned).
    pub(crate) fn give_back(&self, owner: ImageId) {
        let serial = owner.0 & (OWNER_SERIALS - 1);
        if owner.0 & !(OWNER_SERIALS - 1) == self.pool && serial != 0 {
            self.free.locked().push(serial);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_ids_are_never_shared_by_live_images_and_are_reused_once_given_back() {
        let ids = OwnerIds::new(4097); // past 4096 pools: the pool's bits wrap, the serials do not
        let mut live = std::collections::BTreeSet::new();
        for _ in 1..OWNER_SERIALS {
            assert!(live.insert(ids.take().expect("a serial left")), "no two live images share an id");
        }
        assert_eq!(ids.take(), None, "2^20 - 1 live at once");
        let some = *live.iter().nth(12_345).unwrap();
        live.remove(&some);
        ids.give_back(some);
        ids.give_back(ImageId(0)); // not one of these ids: ignored
        assert_eq!(ids.take(), Some(some), "a returned id is taken again");
        assert_eq!(ids.take(), None);
    }
}
