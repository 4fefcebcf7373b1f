//! What the streaming manager measures: request-to-resident latency, traffic, evictions, thrash.

use serde::{Deserialize, Serialize};

/// Latencies in whole frames, as a histogram (exact up to 1023 frames; longer ones count as 1023).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
    sum: u64,
}

/// Percentiles of a [`LatencyHistogram`], in frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u32,
    /// 95th percentile.
    pub p95: u32,
    /// 99th percentile.
    pub p99: u32,
    /// Largest.
    pub max: u32,
}

impl LatencyHistogram {
    const MAX: u32 = 1023;

    /// Adds one latency of `frames`.
    pub fn record(&mut self, frames: u64) {
        let b = frames.min(u64::from(Self::MAX)) as usize;
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.total += 1;
        self.sum += frames;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The smallest latency `l` such that at least `p` (0..=1) of the samples are `<= l`
    /// (nearest-rank); `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<u32> {
        if self.total == 0 {
            return None;
        }
        let rank = ((p.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (frames, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(frames as u32);
            }
        }
        Some(Self::MAX)
    }

    /// Samples per latency: `counts()[l]` latencies of `l` frames (the last bin holds the longer ones).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Count, mean and percentiles.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.total,
            mean: if self.total == 0 { 0.0 } else { self.sum as f64 / self.total as f64 },
            p50: self.percentile(0.50).unwrap_or(0),
            p95: self.percentile(0.95).unwrap_or(0),
            p99: self.percentile(0.99).unwrap_or(0),
            max: self.counts.iter().rposition(|&n| n > 0).unwrap_or(0) as u32,
        }
    }
}

/// What happened in one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameStats {
    /// The frame.
    pub frame: u64,
    /// Distinct tiles wanted this frame (requests, their parents, prefetches).
    pub wanted: u32,
    /// Loads started.
    pub loads_started: u32,
    /// Bytes of the loads started (uncompressed tile bytes).
    pub bytes_started: u64,
    /// Tiles (and tails) that became resident.
    pub became_resident: u32,
    /// Tiles evicted.
    pub evicted: u32,
    /// Wanted tiles not started (upload budget, in-flight cap, pool budget or missing parents).
    pub deferred: u32,
    /// Loads in flight cancelled as no longer wanted.
    #[serde(default)]
    pub cancelled: u32,
}

/// Totals since the manager was created.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamingStats {
    /// Frames updated.
    pub frames: u64,
    /// Tiles and tails made resident.
    pub tiles_streamed: u64,
    /// Their bytes (uncompressed tile bytes, as uploaded).
    pub bytes_streamed: u64,
    /// Tiles evicted.
    pub tiles_evicted: u64,
    /// Tiles wanted again within the thrash window after being evicted.
    pub thrash: u64,
    /// Loads the caller reported failed.
    pub loads_failed: u64,
    /// Loads in flight cancelled because no frame wanted them for
    /// [`cancel_after_frames`](super::StreamingDesc::cancel_after_frames) (not counted as failed).
    #[serde(default)]
    pub loads_cancelled: u64,
    /// Requests for images that are no longer registered (stale feedback), ignored.
    pub stale_requests: u64,
    /// Resident bytes now (tails included).
    pub resident_bytes: u64,
    /// Most resident bytes at the end of any frame.
    pub resident_bytes_peak: u64,
    /// Loads in flight now.
    pub in_flight: u64,
    /// Request-to-resident latency of every tile made resident, in frames: from the first frame
    /// it was wanted (requested, or pulled in as a parent) to the frame it became resident.
    pub latency: LatencyHistogram,
    /// The last frame.
    pub last_frame: FrameStats,
}

impl StreamingStats {
    /// Thrash events per tile streamed (0 when nothing streamed).
    pub fn thrash_rate(&self) -> f64 {
        if self.tiles_streamed == 0 {
            0.0
        } else {
            self.thrash as f64 / self.tiles_streamed as f64
        }
    }
}
