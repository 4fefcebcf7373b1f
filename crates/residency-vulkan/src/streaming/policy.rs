//! The manager's policy as a streamer sets it: the [`StreamerDesc`] setters of the
//! [`StreamingDesc`] tunables, their validation, and the [`StreamingDesc`] a streamer starts its
//! manager with.

use super::StreamerDesc;
use residency_core::desc::{check_range, DescError};
use residency_core::streaming::StreamingDesc;

const DESC: &str = "StreamerDesc";

impl StreamerDesc {
    /// Sets the loads in flight at most ([`max_loads_in_flight`](Self::max_loads_in_flight));
    /// 0 is refused by [`Streamer::new`](super::Streamer::new).
    pub fn with_max_loads_in_flight(mut self, loads: u32) -> Self {
        self.max_loads_in_flight = loads;
        self
    }

    /// Sets the eviction delay `K` in frames
    /// ([`eviction_delay_frames`](Self::eviction_delay_frames)); 0 is refused by
    /// [`Streamer::new`](super::Streamer::new).
    pub fn with_eviction_delay_frames(mut self, frames: u32) -> Self {
        self.eviction_delay_frames = frames;
        self
    }

    /// Sets the evictions per frame for a budget cut
    /// ([`evictions_per_frame`](Self::evictions_per_frame)); 0 is refused by
    /// [`Streamer::new`](super::Streamer::new).
    pub fn with_evictions_per_frame(mut self, tiles: u32) -> Self {
        self.evictions_per_frame = tiles;
        self
    }

    /// Turns prefetching on LOD and low-water warnings on or off ([`prefetch`](Self::prefetch)).
    pub fn with_prefetch(mut self, prefetch: bool) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Sets the thrash window in frames ([`thrash_window_frames`](Self::thrash_window_frames)).
    pub fn with_thrash_window_frames(mut self, frames: u32) -> Self {
        self.thrash_window_frames = frames;
        self
    }

    /// Sets the frames a load in flight may go unwanted before it is cancelled (0: never;
    /// [`cancel_after_frames`](Self::cancel_after_frames)); a value below the frames between two
    /// feedback reads is refused by [`Streamer::new`](super::Streamer::new).
    pub fn with_cancel_after_frames(mut self, frames: u32) -> Self {
        self.cancel_after_frames = Some(frames);
        self
    }

    /// Sets the tiles per layer up to which a mip is pinned besides the tails
    /// ([`pinned_mip_tiles`](Self::pinned_mip_tiles)); more than
    /// [`MAX_PINNED_MIP_TILES`](Self::MAX_PINNED_MIP_TILES) is refused by
    /// [`Streamer::new`](super::Streamer::new).
    pub fn with_pinned_mip_tiles(mut self, tiles: u32) -> Self {
        self.pinned_mip_tiles = tiles;
        self
    }

    /// The most frames between two feedback reads that name a tile in use: a frame writes
    /// feedback every `sampling.frame_interval` frames, read up to `frames_in_flight` frames
    /// later.
    fn feedback_gap(&self, frames_in_flight: u32) -> u32 {
        self.sampling.frame_interval.saturating_add(frames_in_flight)
    }

    /// The policy fields' part of [`validate`](Self::validate).
    pub(super) fn validate_policy(&self) -> Result<(), DescError> {
        let name = &self.name;
        let positive =
            |field, value: u32| check_range(DESC, name, field, value.into(), 1, u32::MAX.into(), "");
        positive("max_loads_in_flight", self.max_loads_in_flight)?;
        positive("eviction_delay_frames", self.eviction_delay_frames)?;
        positive("evictions_per_frame", self.evictions_per_frame)?;
        if let Some(frames) = self.cancel_after_frames.filter(|&f| f != 0) {
            let gap = self.feedback_gap(self.frames_in_flight.clamp(1, 8));
            check_range(DESC, name, "cancel_after_frames", frames.into(), gap.into(), u32::MAX.into(), "")?;
        }
        check_range(
            DESC,
            name,
            "pinned_mip_tiles",
            self.pinned_mip_tiles.into(),
            0,
            Self::MAX_PINNED_MIP_TILES.into(),
            "StreamerDesc::MAX_PINNED_MIP_TILES",
        )?;
        Ok(())
    }

    /// The manager's description with this streamer's policy, for `frames_in_flight` (clamped);
    /// the caller adds the name, budgets, heaps and tile bytes.
    pub(super) fn manager_policy(&self, frames_in_flight: u32) -> StreamingDesc {
        // A load no frame wanted for longer than the gap between two feedback reads is cancelled.
        let cancel_after =
            self.cancel_after_frames.unwrap_or_else(|| self.feedback_gap(frames_in_flight).max(4));
        StreamingDesc {
            max_in_flight: self.max_loads_in_flight,
            eviction_delay_frames: self.eviction_delay_frames,
            evictions_per_frame: self.evictions_per_frame,
            prefetch: self.prefetch,
            thrash_window_frames: self.thrash_window_frames,
            cancel_after_frames: cancel_after,
            pinned_mip_tiles: self.pinned_mip_tiles,
            ..StreamingDesc::default()
        }
    }
}
