//! The `.rvt` tiled virtual-texture file format.
