//! The deterministic simulation's machinery (`tests/sim.rs`): the scheduler that interleaves
//! actors call by call, the fault layer on the catalog, storage and pointer seams, the commit
//! queue and the Kafka feed.

pub mod faults;
pub mod queue;
pub mod sched;
