//! icestream: Kafka (Amazon MSK) record batches into Apache Iceberg tables, exactly once.
//!
//! Everything the Lambda functions and the `icestream` CLI share lives here; the functions'
//! `main.rs` only build a pipeline once and hand it each event.

pub mod audit;
#[cfg(feature = "aws")]
pub mod aws;
pub mod catalog;
pub mod catalog_calls;
pub mod clock;
pub mod cdc;
pub mod codec;
pub mod columns;
pub mod commit;
pub mod confine;
pub mod config;
pub mod dead_letter;
pub mod decode;
pub mod dedup;
pub mod deployment;
pub mod error;
pub mod event;
pub mod failpoint;
pub mod freshness;
pub mod generate;
pub mod ingest;
pub mod kafka_columns;
#[cfg(feature = "aws")]
pub mod lambda;
mod local_files;
pub mod logging;
pub mod manifest_cache;
pub mod maintenance;
pub mod metrics;
mod partition_values;
pub mod pipeline;
pub mod project;
pub mod recover;
pub mod recovery;
pub mod registry;
pub mod replay;
pub mod report;
pub mod schema;
pub mod status;
pub mod storage_calls;
pub mod tables;
#[cfg(test)]
pub(crate) mod testkit;
pub mod window;
pub mod queued;
pub mod sink;
pub mod sort_order;
pub mod writer;
pub mod writer_plan;

pub use config::Config;
pub use error::{Error, Result};
pub use ingest::{IngestPipeline, Summary};
