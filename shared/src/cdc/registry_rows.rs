//! Upsert pipelines of keyed topics (`envelope = "row"`) whose values come through a schema
//! registry: each value's writer is found as the append path finds it ([`WriterPlan`]: Avro,
//! Protobuf or JSON Schema, by frame or by the mapping's metadata; a newer writer's new optional
//! columns are added before the batch). A delete is a null value under its record key, and a
//! registry serializer frames keys too: a framed Avro or JSON Schema key is read with its
//! writer's schema into the JSON image the key columns are decoded from.

use std::collections::BTreeMap;

use iceberg::spec::TableMetadata;
use serde_json::Value;

use super::envelope::avro::datum_json;
use super::registry_envelopes::registry_of;
use crate::error::Result;
use crate::event::{KafkaRecordIn, TopicPartition};
use crate::pipeline::{Pipeline, format_name};
use crate::registry::{Registry, RegistrySpec, WriterId};
use crate::schema::Format;
use crate::writer_plan::WriterPlan;

/// How a framed record key is read.
enum KeyReader {
    Avro(apache_avro::Schema),
    Json,
}

/// The writers of one batch of a keyed topic.
pub struct RegistryRows {
    /// The values' writers and the table schema that takes them all.
    pub values: WriterPlan,
    spec: RegistrySpec,
    /// Per framed key writer: how its keys are read, or why its deletes are dead letters.
    keys: Vec<(WriterId, std::result::Result<KeyReader, String>)>,
}

impl RegistryRows {
    /// The writers of `partitions`' records against `table` as loaded. A registry that cannot
    /// be asked fails the batch (retried; nothing written).
    pub async fn plan(
        registry: &Registry,
        pipeline: &Pipeline,
        partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
        table: &TableMetadata,
    ) -> Result<Self> {
        let spec = registry_of(pipeline)?;
        let values = WriterPlan::new(pipeline, Some(registry), partitions.values().flatten(), table).await?;
        let mut keys: Vec<(WriterId, std::result::Result<KeyReader, String>)> = Vec::new();
        for record in partitions.values().flatten().filter(|r| r.value.is_none()) {
            let Some(writer) = record.key.as_deref().and_then(|key| spec.writer_of(key).ok()) else { continue };
            if keys.iter().any(|(id, _)| *id == writer) {
                continue;
            }
            let registered = registry.registered(writer).await?;
            let reader = match registered.format {
                Format::Avro => apache_avro::Schema::parse_str(&registered.text).map(KeyReader::Avro).map_err(|e| format!("its Avro schema does not parse: {e}")),
                Format::Json => Ok(KeyReader::Json),
                other => Err(format!("{} record keys are not read (Avro and JSON Schema keys are)", format_name(other))),
            }
            .map_err(|e| format!("key writer {writer} ({}): {e}", registered.version));
            keys.push((writer, reader));
        }
        Ok(Self { values, spec, keys })
    }

    /// A record key as JSON, when a registry serializer framed it (`None`: not framed, read as
    /// JSON or text), or why it cannot be read.
    pub fn key_json(&self, key: &[u8]) -> Option<std::result::Result<Value, String>> {
        let frame = self.spec.frame(key, Format::Avro).ok()?;
        Some(match self.keys.iter().find(|(id, _)| *id == frame.writer) {
            Some((_, Ok(KeyReader::Avro(schema)))) => datum_json(schema, &frame.payload, "Avro record key"),
            Some((_, Ok(KeyReader::Json))) => serde_json::from_slice(&frame.payload).map_err(|e| format!("JSON record key: {e}")),
            Some((_, Err(reason))) => Err(format!("schema: {reason}")),
            None => Err(format!("registry: key writer {} was not looked up (record not in the plan)", frame.writer)),
        })
    }
}
