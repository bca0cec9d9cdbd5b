//! Modes layer: how records become table changes — append with offset watermarks (direct or
//! queued), dedup, windows, dead letters, recovery after a crash.

pub mod dead_letter;
pub mod dedup;
pub mod kafka_columns;
pub mod lineage;
pub mod records;
pub mod recovery;
pub mod sink;
pub mod upsert;
pub mod window;
pub mod writer_plan;
