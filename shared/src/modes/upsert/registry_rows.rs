//! Upsert pipelines of keyed topics (`envelope = "row"`) whose values come through a schema
//! registry: each value's writer is found as the append path finds it ([`WriterPlan`]: Avro,
//! Protobuf or JSON Schema, by frame or by the mapping's metadata; a newer writer's new optional
//! columns are added before the batch). A delete is a null value under its record key, and a
//! registry serializer frames keys too: a framed Avro, Protobuf or JSON Schema key is read with
//! its writer's schema (a Protobuf key: the message its frame names) into the JSON image the
//! key columns are decoded from.

use std::collections::BTreeMap;

use iceberg::spec::TableMetadata;
use serde_json::Value;

use super::envelope::avro::datum_json;
use super::envelope::protobuf::message_json_of;
use super::registry_envelopes::registry_of;
use crate::base::error::Result;
use crate::model::event::{KafkaRecordIn, TopicPartition};
use crate::model::pipeline::{Pipeline, format_name};
use crate::model::registry::{Field, MessageIndex, Registry, RegistrySpec, WriterId};
use crate::model::schema::{Format, SourceSchema};
use crate::modes::writer_plan::WriterPlan;

/// How a framed record key is read.
enum KeyReader {
    Avro(apache_avro::Schema),
    Protobuf(prost_reflect::MessageDescriptor),
    Json,
}

/// A key's writer schema and, for Protobuf, the message its frame names.
type KeyWriter = (WriterId, Option<MessageIndex>);

/// The writers of one batch of a keyed topic.
pub struct RegistryRows {
    /// The values' writers and the table schema that takes them all.
    pub values: WriterPlan,
    spec: RegistrySpec,
    /// Per framed key writer: how its keys are read, or why its deletes are dead letters.
    keys: Vec<(KeyWriter, std::result::Result<KeyReader, String>)>,
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
        let values = WriterPlan::new(pipeline, Some(registry), partitions.values().flatten(), table, &[]).await?;
        let mut keys: Vec<(KeyWriter, std::result::Result<KeyReader, String>)> = Vec::new();
        for key in partitions.values().flatten().filter(|r| r.value.is_none()).filter_map(|r| r.key.as_deref()) {
            let Ok(writer) = spec.writer_of(key) else { continue };
            let registered = match registry.registered_or_reason(writer, &pipeline.topics, Field::Key).await? {
                Ok(registered) => registered,
                Err(reason) => {
                    if !keys.iter().any(|(known, _)| known.0 == writer) {
                        keys.push(((writer, None), Err(reason)));
                    }
                    continue;
                }
            };
            // A Protobuf frame also names the message (a frame that does not parse is a dead
            // letter when the key is read).
            let message = match registered.format {
                Format::Protobuf => match spec.frame(key, Format::Protobuf) {
                    Ok(frame) => frame.message,
                    Err(_) => continue,
                },
                _ => None,
            };
            if keys.iter().any(|(known, _)| known.0 == writer && known.1 == message) {
                continue;
            }
            let reader = match registered.format {
                Format::Avro => apache_avro::Schema::parse_str(&registered.text)
                    .map(KeyReader::Avro)
                    .map_err(|e| format!("its Avro schema does not parse: {e}")),
                Format::Json => Ok(KeyReader::Json),
                Format::Protobuf => match crate::model::registry::compile(&registered, message.as_ref(), Format::Protobuf) {
                    Ok(SourceSchema::Protobuf(compiled)) => Ok(KeyReader::Protobuf(compiled.message)),
                    Ok(_) => Err(format!("{} record keys are not read", format_name(registered.format))),
                    Err(e) => Err(e),
                },
            }
            .map_err(|e| format!("key writer {writer} ({}): {e}", registered.version));
            keys.push(((writer, message), reader));
        }
        Ok(Self { values, spec, keys })
    }

    /// A record key as JSON, when a registry serializer framed it (`None`: not framed, read as
    /// JSON or text), or why it cannot be read.
    pub fn key_json(&self, key: &[u8]) -> Option<std::result::Result<Value, String>> {
        let frame = self.spec.frame(key, Format::Avro).ok()?;
        let mut readers = self.keys.iter().filter(|((id, _), _)| *id == frame.writer).peekable();
        let protobuf = matches!(readers.peek(), Some((_, Ok(KeyReader::Protobuf(_)))));
        Some(if protobuf {
            // The payload starts with the message index: read the frame as Protobuf's.
            self.spec.frame(key, Format::Protobuf).map_err(|e| format!("registry frame: {e}")).and_then(|frame| {
                match readers.find(|((_, m), _)| *m == frame.message) {
                    // A key is an identity: finer than microseconds it is refused, never cut
                    // (two keys would become one).
                    Some((_, Ok(KeyReader::Protobuf(message)))) => {
                        message_json_of(message, &frame.payload, "Protobuf record key", crate::model::pipeline::TimestampPrecision::Reject)
                    }
                    Some((_, Err(reason))) => Err(format!("schema: {reason}")),
                    _ => Err(format!(
                        "registry: key writer {} (message {:?}) was not looked up (record not in the plan)",
                        frame.writer, frame.message
                    )),
                }
            })
        } else {
            match readers.next() {
                Some((_, Ok(KeyReader::Avro(schema)))) => datum_json(schema, &frame.payload, "Avro record key"),
                Some((_, Ok(KeyReader::Json))) => serde_json::from_slice(&frame.payload).map_err(|e| format!("JSON record key: {e}")),
                Some((_, Ok(KeyReader::Protobuf(_)))) => Err("a Protobuf record key framed without its message index".into()),
                Some((_, Err(reason))) => Err(format!("schema: {reason}")),
                None => Err(format!("registry: key writer {} was not looked up (record not in the plan)", frame.writer)),
            }
        })
    }
}
