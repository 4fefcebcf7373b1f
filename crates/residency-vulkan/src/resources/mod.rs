//! Resources placed in memory: buffers (placed, committed, ranges of a pool page), images with their
//! views and samplers, and the staging uploader that fills them.

pub(crate) mod buffer;
pub(crate) mod image;
pub(crate) mod upload;
