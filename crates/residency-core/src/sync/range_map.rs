//! A map from a `u64` range `[0, len)` to values, kept as sorted pieces that split where values
//! differ and merge again where neighbours become equal.

use std::ops::Range;

/// Sorted pieces `(start, end, value)` tiling `[0, len)` with no two equal neighbours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RangeMap<V> {
    pieces: Vec<(u64, u64, V)>,
}

impl<V: Copy + Eq> RangeMap<V> {
    /// One piece `[0, len)` holding `value`.
    pub(crate) fn new(len: u64, value: V) -> RangeMap<V> {
        RangeMap { pieces: vec![(0, len, value)] }
    }

    /// The pieces in order.
    pub(crate) fn pieces(&self) -> &[(u64, u64, V)] {
        &self.pieces
    }

    /// Index of the piece that contains `at`, after making `at` a piece boundary (`at` may be the
    /// end of the map, which returns the number of pieces).
    fn split_at(&mut self, at: u64) -> usize {
        let i = self.pieces.partition_point(|&(_, end, _)| end <= at);
        if i == self.pieces.len() {
            return i;
        }
        let (start, end, value) = self.pieces[i];
        if start == at {
            return i;
        }
        self.pieces[i].1 = at;
        self.pieces.insert(i + 1, (at, end, value));
        i + 1
    }

    /// Calls `f(start, end, &mut value)` on each piece of `range` (splitting pieces at its ends),
    /// then merges equal neighbours again.
    pub(crate) fn update(&mut self, range: Range<u64>, mut f: impl FnMut(u64, u64, &mut V)) {
        if range.is_empty() {
            return;
        }
        let first = self.split_at(range.start);
        let last = self.split_at(range.end);
        for piece in &mut self.pieces[first..last] {
            f(piece.0, piece.1, &mut piece.2);
        }
        // Merge equal neighbours in the window [first - 1, last] (the only places that changed).
        let lo = first.saturating_sub(1);
        let hi = (last + 1).min(self.pieces.len());
        let mut merged: Vec<(u64, u64, V)> = Vec::with_capacity(hi - lo);
        for &piece in &self.pieces[lo..hi] {
            match merged.last_mut() {
                Some(prev) if prev.2 == piece.2 && prev.1 == piece.0 => prev.1 = piece.1,
                _ => merged.push(piece),
            }
        }
        self.pieces.splice(lo..hi, merged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_where_values_differ_and_merges_back() {
        let mut m = RangeMap::new(100, 0u8);
        m.update(10..20, |_, _, v| *v = 1);
        assert_eq!(m.pieces(), &[(0, 10, 0), (10, 20, 1), (20, 100, 0)]);
        m.update(20..30, |_, _, v| *v = 1);
        assert_eq!(m.pieces(), &[(0, 10, 0), (10, 30, 1), (30, 100, 0)]);
        let mut seen = Vec::new();
        m.update(5..40, |s, e, v| {
            seen.push((s, e, *v));
            *v = 0;
        });
        assert_eq!(seen, vec![(5, 10, 0), (10, 30, 1), (30, 40, 0)]);
        assert_eq!(m.pieces(), &[(0, 100, 0)]);
        m.update(0..100, |_, _, v| *v = 2);
        assert_eq!(m.pieces(), &[(0, 100, 2)]);
    }
}
