//! A cursor over the fuzzer's bytes that never fails: once the bytes run out every read is zero,
//! so every input, however short, decodes to some sequence of operations.

/// Reads little-endian integers and choices from a byte slice.
#[derive(Debug)]
pub(crate) struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let start = self.pos.min(self.data.len());
        let end = (start + N).min(self.data.len());
        out[..end - start].copy_from_slice(&self.data[start..end]);
        self.pos = self.pos.saturating_add(N);
        out
    }

    pub(crate) fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    pub(crate) fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A value in `0..n` (`n > 0`), from as few bytes as `n` needs.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let raw = if n <= 1 << 8 {
            u64::from(self.u8())
        } else if n <= 1 << 16 {
            u64::from(self.u16())
        } else if n <= 1 << 32 {
            u64::from(self.u32())
        } else {
            self.u64()
        };
        raw % n
    }

    /// A value in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        match (hi - lo).checked_add(1) {
            Some(n) => lo + self.below(n),
            None => self.u64(),
        }
    }

    /// One of `items` (non-empty).
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// A `u64` that is usually small: mostly below 2^16, sometimes below 2^32, sometimes anything,
    /// sometimes at the edges of the range.
    pub(crate) fn size(&mut self) -> u64 {
        match self.u8() % 16 {
            0 => u64::MAX - u64::from(self.u8()),
            1 => self.u64(),
            2..=4 => u64::from(self.u32()),
            5 => 1u64 << self.below(64),
            _ => u64::from(self.u16()),
        }
    }

    /// A power of two `2^0..=2^max_log2`, or (rarely) any value, for alignment arguments.
    pub(crate) fn alignment(&mut self, max_log2: u32) -> u64 {
        match self.u8() % 16 {
            0 => self.u64(),
            _ => 1u64 << self.below(u64::from(max_log2) + 1),
        }
    }
}
