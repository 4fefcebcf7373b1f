//! Offset allocators for heaps: O(1) two-level segregated fit and per-frame rings.
