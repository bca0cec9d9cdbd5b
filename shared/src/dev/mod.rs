//! Dev tooling, not on any function's path: the reference telemetry encoders (`codec`) and the
//! event generator for demos, benchmarks and tests.

pub mod codec;
pub mod generate;
