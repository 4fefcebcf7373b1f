//! Sparse tile math: standard block shapes, tiles per mip, mip tails, page tables and tile pools.
