//! The Kafka side of the `icestream` command line, as a library so tests can drive it:
//! producers ([`produce`]) and the local event source mapping ([`esm`]).

#[cfg(feature = "kafka")]
pub mod broker_gaps;
#[cfg(feature = "kafka")]
pub mod esm;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub mod produce;

/// Why a command this build left out is missing, and which build has it.
pub fn not_built(what: &str, feature: &str) -> anyhow::Error {
    anyhow::anyhow!(icestream::base::error::not_built_message(what, feature))
}
