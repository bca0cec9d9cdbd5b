//! The keyed engine: guarded apply of changes to an Iceberg table with any key, merge-on-read
//! ([`apply`]), and what it stands on — keys as arrow-row bytes ([`keys`]), ranks (order value,
//! then Kafka position, [`rank`]), which files and pages can hold a touched key ([`probe`],
//! [`key_reader`], the warm [`key_index`]), and tombstones and truncates ([`tombstones`]). It
//! knows no envelope and no pipeline: the upsert mode ([`crate::modes::upsert`]) and replays hand it
//! decoded rows and deletes.

pub mod apply;
mod file_reads;
pub mod key_index;
pub mod key_reader;
pub mod keys;
pub mod probe;
pub mod rank;
pub mod stats;
pub mod tombstones;
