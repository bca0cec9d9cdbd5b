//! Model layer: what the user declares and what Kafka hands over, checked at start — knobs,
//! pipeline files, source schemas, registries, table definitions, the MSK event.

pub mod config;
pub mod event;
pub mod evolve;
pub mod infer;
pub mod pipeline;
pub mod registry;
pub mod schema;
pub mod sort_order;
pub mod tables;
