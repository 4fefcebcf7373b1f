//! VMA's test random number generator (`RandomNumberGenerator` in VMA's `src/Common.h`), so that
//! the ported workloads draw the same numbers as VMA's own benchmark.
//!
//! VMA computes `GenerateFast() ^ (GenerateFast() >> 7)`; C++ leaves the order of the two calls
//! unspecified. We take the left operand first (what MSVC, VMA's test platform, does), i.e. the
//! first draw unshifted and the second shifted.

/// A 32-bit linear congruential generator with VMA's constants.
#[derive(Clone, Debug)]
pub struct VmaRng {
    value: u32,
}

impl VmaRng {
    /// A generator seeded like `RandomNumberGenerator{seed}`.
    pub fn new(seed: u32) -> Self {
        Self { value: seed }
    }

    fn generate_fast(&mut self) -> u32 {
        self.value = self.value.wrapping_mul(196_314_165).wrapping_add(907_633_515);
        self.value
    }

    /// The next number, as `RandomNumberGenerator::Generate`.
    pub fn generate(&mut self) -> u32 {
        let first = self.generate_fast();
        let second = self.generate_fast();
        first ^ (second >> 7)
    }
}
