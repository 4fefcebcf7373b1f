//! A tile request as the streaming manager consumes it, decoded from feedback.

use crate::tiles::{ImageId, TileIndex};
use serde::{Deserialize, Serialize};

/// Why a shader asked for a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// The sample needed this tile and it was not resident (it fell back to a coarser mip).
    Miss,
    /// The sample was about to need this finer tile (a prefetch warning): prefetch it.
    LodWarning,
    /// The seed's low-water warning (`sparseTexelMinLodWarning`): a resident sample fetched from
    /// this tile, whose mip (the level that warned, `sparseTexelLodWarningFetch`) is at or below
    /// the texture's low-water mark. The data was valid; the signal is to stream the next finer
    /// level there (the manager keeps the tile and prefetches its children).
    MinLodWarning,
}

/// One de-duplicated request of one frame: a tile of an image, why, and how many pixels asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileRequest {
    /// The image.
    pub image: ImageId,
    /// The tile wanted.
    pub tile: TileIndex,
    /// Its mip.
    pub mip: u32,
    /// Miss or warning.
    pub kind: RequestKind,
    /// Pixels that asked (1 when the feedback buffer does not count).
    pub pixels: u32,
}
