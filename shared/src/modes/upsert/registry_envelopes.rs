//! Upsert pipelines whose values come through a schema registry (Debezium's AvroConverter, or
//! Confluent's ProtobufConverter): each record's writer envelope, by the id (and Protobuf
//! message) its frame names (fetched once per container), and
//! the table schema that takes the rows of all of them: a newer writer's new columns are added
//! before the batch is decoded; a writer the table cannot take leaves its records as dead
//! letters with the reason.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::spec::{Schema, TableMetadata};

use crate::base::error::{Error, Result};
use crate::model::event::{KafkaRecordIn, TopicPartition};
use crate::model::pipeline::Pipeline;
use crate::model::registry::{Field, MessageIndex, Registry, RegistrySpec, WriterId};
use crate::model::schema::debezium::DebeziumAvro;
use crate::model::schema::debezium_proto::DebeziumProto;
use crate::model::schema::{Format, SourceSchema};
use crate::modes::writer_plan::evolve_table;

/// One writer's envelope.
pub enum WriterEnvelope {
    Avro(DebeziumAvro),
    Protobuf(DebeziumProto),
}

impl WriterEnvelope {
    /// One record's payload as the JSON converter's payload, and the row fields' Connect schemas.
    pub fn payload(
        &self,
        payload: &[u8],
        precision: crate::model::pipeline::TimestampPrecision,
    ) -> std::result::Result<(serde_json::Value, &serde_json::Value), String> {
        match self {
            WriterEnvelope::Avro(e) => Ok((super::envelope::avro::payload_json(&e.writer, payload)?, &e.connect)),
            WriterEnvelope::Protobuf(e) => Ok((super::envelope::protobuf::payload_json(&e.envelope, payload, precision)?, &e.connect)),
        }
    }

    fn row(&self) -> &SourceSchema {
        match self {
            WriterEnvelope::Avro(e) => &e.row,
            WriterEnvelope::Protobuf(e) => &e.row,
        }
    }
}

/// A writer schema and, for Protobuf, the message the frame names.
type WriterKey = (WriterId, Option<MessageIndex>);

/// A writer's reader index and envelope, or why its records are dead letters.
type Accepted = std::result::Result<(usize, Arc<WriterEnvelope>), String>;

/// The writer envelopes of one batch.
pub struct RegistryEnvelopes {
    spec: RegistrySpec,
    format: Format,
    /// Per writer: its reader index and envelope, or why its records are dead letters.
    by_id: Vec<(WriterKey, Accepted)>,
    /// The accepted writers' rows, read from JSON (reader index order).
    pub rows: Vec<Arc<SourceSchema>>,
    /// The table's schema with every accepted writer's row folded in.
    pub target: Schema,
    /// Whether `target` differs from the table's current schema.
    pub evolves: bool,
}

/// The registry a pipeline's frames name.
pub(super) fn registry_of(pipeline: &Pipeline) -> Result<RegistrySpec> {
    pipeline.registry.clone().ok_or_else(|| Error::Invariant(format!("pipeline `{}` has no registry", pipeline.table)))
}

/// What the frame of a record says, or why it says nothing.
fn frame_of<'a>(
    spec: &RegistrySpec,
    format: Format,
    record: &KafkaRecordIn,
    value: &'a [u8],
) -> std::result::Result<crate::model::registry::Frame<'a>, String> {
    if record.value_schema.is_some() {
        return Err(
            "the event source mapping decoded this record (valueSchemaMetadata): an upsert pipeline reads the registry frame itself; \
                    leave the mapping's schema registry configuration off"
                .into(),
        );
    }
    spec.frame(value, format).map_err(|e| format!("registry frame: {e}"))
}

impl RegistryEnvelopes {
    /// The envelopes of `partitions`' records against `table` as loaded. A registry that cannot
    /// be asked fails the batch (retried; nothing written).
    pub async fn plan(
        registry: &Registry,
        pipeline: &Pipeline,
        partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
        table: &TableMetadata,
    ) -> Result<Self> {
        let spec = registry_of(pipeline)?;
        let mut ids: Vec<WriterKey> = Vec::new();
        for record in partitions.values().flatten() {
            let Some(value) = record.value.as_deref().filter(|_| record.value_schema.is_none()) else { continue };
            // The header names an Avro writer: the payload is inflated once, when the record is
            // read. A Protobuf frame also names the message.
            let writer = match pipeline.format {
                Format::Protobuf => spec.frame(value, Format::Protobuf).map(|f| (f.writer, f.message)),
                _ => spec.writer_of(value).map(|w| (w, None)),
            };
            if let Ok(writer) = writer
                && !ids.contains(&writer)
            {
                ids.push(writer);
            }
        }
        let mut out = Self {
            spec,
            format: pipeline.format,
            by_id: Vec::new(),
            rows: Vec::new(),
            target: (**table.current_schema()).clone(),
            evolves: false,
        };
        let mut last = table.last_column_id();
        let declared = pipeline.upsert.as_ref().map(|u| u.declared_row.clone()).unwrap_or_default();
        for (id, message) in ids {
            let registered = match registry.registered_or_reason(id, &pipeline.topics, Field::Value).await? {
                Ok(registered) => registered,
                Err(reason) => {
                    out.by_id.push(((id, message), Err(reason)));
                    continue;
                }
            };
            let accepted = (|| {
                let envelope = match (registered.format, pipeline.format) {
                    (Format::Avro, Format::Avro) => WriterEnvelope::Avro(DebeziumAvro::parse(&registered.text)?),
                    (Format::Protobuf, Format::Protobuf) => {
                        let SourceSchema::Protobuf(compiled) =
                            crate::model::registry::compile(&registered, message.as_ref(), Format::Protobuf)?
                        else {
                            return Err("the registered schema did not compile to a Protobuf message".into());
                        };
                        WriterEnvelope::Protobuf(DebeziumProto::parse(&compiled.message, Some(&out.target), &declared)?)
                    }
                    (written, read) => {
                        return Err(format!(
                            "the registered schema is {}, not a Debezium {} envelope",
                            crate::model::pipeline::format_name(written),
                            crate::model::pipeline::format_name(read)
                        ));
                    }
                };
                let mut trial = last;
                if let Some(schema) = evolve_table(table, &out.target, envelope.row(), &mut trial)? {
                    out.target = schema;
                    out.evolves = true;
                    last = trial;
                }
                out.rows.push(Arc::new(envelope.row().as_json()));
                Ok((out.rows.len() - 1, Arc::new(envelope)))
            })()
            .map_err(|e| format!("writer {id} ({}): {e}", registered.version));
            if let Err(reason) = &accepted {
                tracing::warn!(table = %pipeline.table, writer = %id, %reason, "writer schema refused; its records go to the dead-letter table");
            }
            out.by_id.push(((id, message), accepted));
        }
        Ok(out)
    }

    /// The reader index, envelope and payload of one record's value, or why it is a dead letter.
    pub fn read<'a>(
        &self,
        record: &KafkaRecordIn,
        value: &'a [u8],
    ) -> std::result::Result<(usize, &WriterEnvelope, Cow<'a, [u8]>), String> {
        let frame = frame_of(&self.spec, self.format, record, value)?;
        let message = if self.format == Format::Protobuf { frame.message.clone() } else { None };
        match self.by_id.iter().find(|((id, m), _)| *id == frame.writer && *m == message) {
            Some((_, Ok((reader, envelope)))) => Ok((*reader, envelope, frame.payload)),
            Some((_, Err(reason))) => Err(format!("schema: {reason}")),
            None => Err(format!("registry: {} was not looked up (record not in the plan)", frame.writer)),
        }
    }
}
