//! Resource state tracking on synchronization2: per-resource states, the barrier batcher, transient aliasing.
