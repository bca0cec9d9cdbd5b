//! Engine layer: Iceberg operations iceberg-rust lacks, built on its public blocks — commits and
//! their pointer swaps, Parquet writers, catalogs, what a delete may touch.

pub mod catalog;
pub mod catalog_calls;
pub mod columns;
pub mod commit;
pub mod confine;
pub mod keyed;
mod local_files;
pub(crate) mod partition_values;
pub mod project;
pub mod queue;
pub mod storage_calls;
pub mod writer;
