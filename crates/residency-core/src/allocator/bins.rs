//! Size classes of the two-level segregated fit: the mapping from a block size to a bin.
//!
//! A size below [`SL_COUNT`] has a bin of its own (first level 0, one bin per byte). A larger size
//! `s` with most significant bit `m` falls in first level `m - SL_LOG2 + 1`, and the [`SL_LOG2`]
//! bits below its top bit choose one of [`SL_COUNT`] second-level bins. Every bin therefore spans
//! at most 1/16 of its lower bound, so rounding a request up to the next bin wastes at most 6.25 %.

/// log2 of the number of second-level bins per first level.
pub(crate) const SL_LOG2: u32 = 4;
/// Number of second-level bins per first level.
pub(crate) const SL_COUNT: usize = 1 << SL_LOG2;
/// Number of first levels needed for the whole `u64` range.
pub(crate) const FL_COUNT: usize = 64 - SL_LOG2 as usize + 1;
/// Total number of bins.
pub(crate) const BIN_COUNT: usize = FL_COUNT * SL_COUNT;

/// First levels the bitmaps and heads have room for: [`FL_COUNT`] rounded up to a power of two,
/// so that a first level masked with `FL_SLOTS - 1` indexes them without a bounds check.
pub(crate) const FL_SLOTS: usize = 64;
/// Free-list heads: [`BIN_COUNT`] rounded up to a power of two, for the same reason.
pub(crate) const BIN_SLOTS: usize = FL_SLOTS * SL_COUNT;

/// `log2` of the width of one bin of the first level of `size`: 0 below `2 * SL_COUNT` (bins one
/// byte wide), then `msb(size) - SL_LOG2`. One `leading_zeros`, no branch.
#[inline(always)]
fn bin_shift(size: u64) -> u32 {
    63 - (size | SL_COUNT as u64).leading_zeros() - SL_LOG2
}

/// The bin a free block of `size` bytes is filed in: the last bin whose lower bound is `<= size`.
///
/// With `shift = bin_shift(size)`, `size >> shift` lies in `[SL_COUNT, 2 * SL_COUNT)` (or is the
/// size itself below `SL_COUNT`), so `shift * SL_COUNT + (size >> shift)` is
/// `(first level) * SL_COUNT + (second level)` without a branch for the small sizes.
#[inline(always)]
pub(crate) fn bin_floor(size: u64) -> usize {
    let shift = bin_shift(size);
    ((shift as usize) << SL_LOG2) + (size >> shift) as usize
}

/// The first bin all of whose blocks are `>= size` bytes, or `None` when no bin can hold `size`:
/// the floor bin, or the next one when `size` is above its lower bound.
#[inline(always)]
pub(crate) fn bin_ceil(size: u64) -> Option<usize> {
    let shift = bin_shift(size);
    let above_lower_bound = size & ((1u64 << shift) - 1) != 0;
    let bin = ((shift as usize) << SL_LOG2) + (size >> shift) as usize + above_lower_bound as usize;
    (bin < BIN_COUNT).then_some(bin)
}

/// The smallest size filed in bin `bin`.
#[cfg(test)]
pub(crate) fn bin_lower_bound(bin: usize) -> u64 {
    let fl = bin / SL_COUNT;
    let sl = (bin % SL_COUNT) as u64;
    if fl == 0 {
        sl
    } else {
        (SL_COUNT as u64 + sl) << (fl - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_sizes_have_exact_bins() {
        for s in 0..SL_COUNT as u64 {
            assert_eq!(bin_floor(s), s as usize);
            assert_eq!(bin_ceil(s), Some(s as usize));
        }
    }

    #[test]
    fn floor_and_ceil_bracket_the_size() {
        let around_powers = (0..64).flat_map(|bit| {
            let p = 1u64 << bit;
            [p - 1, p, p + 1, p | (p >> 1), p | (p >> 4), p | (p >> 5), p.wrapping_mul(2).wrapping_sub(1)]
        });
        let samples =
            (1u64..5000).chain([u64::MAX / 2, u64::MAX - 1, 1 << 40, (1 << 40) + 1]).chain(around_powers);
        for s in samples {
            let f = bin_floor(s);
            assert!(f < BIN_COUNT);
            assert!(bin_lower_bound(f) <= s, "floor of {s}");
            if f + 1 < BIN_COUNT {
                assert!(bin_lower_bound(f + 1) > s, "floor of {s} is the last bin <= s");
            }
            if let Some(c) = bin_ceil(s) {
                assert!(bin_lower_bound(c) >= s, "ceil of {s}");
                assert!(c == f || c == f + 1);
            }
        }
        assert_eq!(bin_floor(u64::MAX), BIN_COUNT - 1);
        assert_eq!(bin_ceil(u64::MAX), None);
    }
}
