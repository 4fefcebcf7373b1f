//! Streaming: shader feedback requests, LOD warnings and the residency manager policy.
