//! icestream: Kafka (Amazon MSK) record batches into Apache Iceberg tables, exactly once.
//!
//! Everything the Lambda functions and the `icestream` CLI share lives here; the functions'
//! `main.rs` only build a pipeline once and hand it each event. The modules are grouped by layer,
//! and imports run downwards only (`tests/layers.rs` checks it):
//! `services` → `modes` → `engine` → `decode` → `model` → `base`; `dev` sits apart.

pub mod base;
pub mod decode;
#[cfg(any(test, feature = "dev"))]
pub mod dev;
pub mod engine;
pub mod model;
pub mod modes;
pub mod services;
#[cfg(test)]
pub(crate) mod testkit;

pub use base::error::{Error, Result};
pub use model::config::Config;
pub use services::ingest::{IngestPipeline, Summary};
