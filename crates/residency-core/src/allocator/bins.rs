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

/// The bin a free block of `size` bytes is filed in: the last bin whose lower bound is `<= size`.
#[inline]
pub(crate) fn bin_floor(size: u64) -> usize {
    if size < SL_COUNT as u64 {
        return size as usize;
    }
    let msb = 63 - size.leading_zeros();
    let fl = (msb - SL_LOG2 + 1) as usize;
    let sl = ((size >> (msb - SL_LOG2)) as usize) & (SL_COUNT - 1);
    fl * SL_COUNT + sl
}

/// The first bin all of whose blocks are `>= size` bytes, or `None` when no bin can hold `size`.
#[inline]
pub(crate) fn bin_ceil(size: u64) -> Option<usize> {
    if size < SL_COUNT as u64 {
        return Some(size as usize);
    }
    let msb = 63 - size.leading_zeros();
    let round = (1u64 << (msb - SL_LOG2)) - 1;
    size.checked_add(round).map(bin_floor)
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
        let samples = (1u64..5000).chain([u64::MAX / 2, u64::MAX - 1, 1 << 40, (1 << 40) + 1]);
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
