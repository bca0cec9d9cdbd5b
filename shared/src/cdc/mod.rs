//! Upserts (`mode = "upsert"`): the keyed engine (guarded apply, probes, key reads, key index,
//! tombstones, ranks) and the upsert mode over it (envelopes, registry writers, changelog,
//! layout, rebuild from the changelog).

pub mod changelog;
pub mod envelope;
mod file_reads;
pub mod keyed;
pub mod key_index;
pub mod key_reader;
pub mod key_tombstones;
pub mod keys;
pub mod layout;
pub mod probe;
pub mod rank;
pub mod registry_envelopes;
pub mod registry_rows;
pub mod rebuild_keyed;
pub mod stats;
pub mod upsert;
