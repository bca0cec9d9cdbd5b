//! The Kafka side of the `icestream` command line, as a library so tests can drive it:
//! producers ([`produce`]) and the local event source mapping ([`esm`]).

pub mod broker_gaps;
pub mod esm;
pub mod kafka;
pub mod produce;
