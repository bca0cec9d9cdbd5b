//! Base layer: errors, AWS clients, logging, time and the small readers every layer above uses.
//! Imports nothing else of the crate.

#[cfg(feature = "aws")]
pub mod aws;
pub mod clock;
pub mod error;
pub mod failpoint;
pub mod freshness;
pub mod logging;
pub mod varint;
