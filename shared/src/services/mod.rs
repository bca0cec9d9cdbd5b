//! Services layer: what the functions and the CLI call — ingest, the queued committer,
//! maintenance, audit, replay, recover, status, report, metrics, the deployment contract.

pub mod audit;
pub mod deployment;
pub mod ingest;
#[cfg(feature = "aws")]
pub mod lambda;
pub mod maintenance;
pub mod metrics;
pub mod queued;
pub mod recover;
pub mod replay;
pub mod report;
pub mod status;
