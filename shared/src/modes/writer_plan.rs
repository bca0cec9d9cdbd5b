//! Which writer schema each record of a batch was written with, and the table schema that can
//! take them all: the pipeline's schema when values are plain, the registry's schema per id
//! when they are framed. Writer schemas the table cannot take (see `schema::evolve`) are kept
//! with their reason: their records become dead letters, the others still land.
//!
//! A value the event source mapping already validated against a registry (its own
//! `SchemaRegistryConfig`) comes without a frame, with `valueSchemaMetadata` naming the writer
//! schema's id: as the record in JSON (`EventRecordFormat = JSON`, read with the writer's fields
//! as JSON), or as the bare payload (`SOURCE`, read with the writer's own reader).

use std::sync::Arc;

use iceberg::spec::{Schema, TableMetadata};
use iceberg::table::Table;

use crate::base::error::{Error, Result};
use crate::engine::commit::replace_column::{self, replace_columns};
use crate::model::event::KafkaRecordIn;
use crate::model::evolve::{add_kafka_columns, evolve};
use crate::model::infer::Inference;
use crate::model::pipeline::Pipeline;
use crate::model::registry::frame::InflateBudget;
use crate::model::registry::{MessageIndex, Registry, WriterId};
use crate::model::schema::{Format, SourceSchema};

/// A record's writer, as its frame or the mapping's metadata names it, and whether the value is
/// that record as JSON.
type WriterKey = (WriterId, Option<MessageIndex>, bool);

/// How the value of a record names its writer.
enum Named<'a> {
    Key(WriterKey, std::borrow::Cow<'a, [u8]>),
    Bad(String),
}

/// Whether a value is a JSON object (the mapping's `EventRecordFormat = JSON`).
fn is_json_object(value: &[u8]) -> bool {
    value.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// The writer a registry pipeline's record names: the mapping's metadata, else the frame,
/// its payload inflated within `budget`; `None`: only the writer is wanted (planning), nothing
/// is inflated and the payload is the value as it is.
fn named<'a>(pipeline: &Pipeline, record: &KafkaRecordIn, value: &'a [u8], budget: Option<&InflateBudget>) -> Named<'a> {
    let Some(spec) = &pipeline.registry else { return Named::Bad("no registry".into()) };
    match &record.value_schema {
        Some(meta) => match WriterId::parse(&meta.schema_id) {
            Some(id) => Named::Key((id, None, is_json_object(value)), std::borrow::Cow::Borrowed(value)),
            None => Named::Bad(format!(
                "valueSchemaMetadata.schemaId {:?} is neither a Confluent schema id nor a Glue schema version id",
                meta.schema_id
            )),
        },
        None => match budget {
            Some(budget) => match spec.frame_within(value, pipeline.format, budget) {
                Ok(frame) => Named::Key((frame.writer, frame.message, false), frame.payload),
                Err(e) => Named::Bad(format!("registry frame: {e}")),
            },
            None => match spec.key(value, pipeline.format) {
                Ok((writer, message)) => Named::Key((writer, message, false), std::borrow::Cow::Borrowed(value)),
                Err(e) => Named::Bad(format!("registry frame: {e}")),
            },
        },
    }
}

/// The batch's writer schemas and the table schema the rows are decoded into.
pub struct WriterPlan {
    /// Writer schemas the table can take, by decoder reader index.
    pub writers: Vec<Arc<SourceSchema>>,
    /// Per framed writer: its reader index, or why its records are dead letters. A batch has a
    /// handful of writers: a list compared by id is cheaper per record than hashing.
    readers: Vec<(WriterKey, std::result::Result<usize, String>)>,
    /// Plain values (no registry): the pipeline's schema is reader 0, or why the table cannot
    /// take it (a table changed since start by another engine: every record is a dead letter);
    /// reader 1 reads the same schema's records as JSON (the mapping validated them).
    plain: std::result::Result<usize, String>,
    /// The table's schema with every accepted writer folded in.
    pub target: Schema,
    /// Whether `target` differs from the table's current schema (the commit evolves it).
    pub evolves: bool,
    /// What the batch's compressed payloads may still inflate to.
    inflate: InflateBudget,
    /// `schema = "infer"`: the columns the batch's values and the table say; a value that
    /// conflicts with them is a dead letter.
    inferred: Option<Inference>,
}

/// [`evolve`] for a table: also refuses a new column named like one of its partition fields
/// (Iceberg would refuse the schema at commit, again on every retry).
pub fn evolve_table(
    table: &TableMetadata,
    base: &Schema,
    writer: &SourceSchema,
    last_column_id: &mut i32,
) -> std::result::Result<Option<Schema>, String> {
    let evolved = evolve(base, writer.fields(), last_column_id)?;
    let partition_names: Vec<&str> = table.partition_specs_iter().flat_map(|s| s.fields().iter().map(|f| f.name.as_str())).collect();
    let added = evolved.iter().flat_map(|s| s.as_struct().fields()).filter(|f| base.field_by_name(&f.name).is_none());
    if let Some(clash) = added.into_iter().find(|f| partition_names.contains(&f.name.as_str())) {
        return Err(format!("field `{}`: new in the writer schema, but the table has a partition field of that name", clash.name));
    }
    Ok(evolved)
}

/// The columns of a `schema = "infer"` batch: the table's, with every field its values add
/// (a value that conflicts is left out, and is a dead letter when read).
fn infer<'r>(table: &TableMetadata, records: impl Iterator<Item = &'r KafkaRecordIn>, replaceable: &[String]) -> Inference {
    let partition_names = table.partition_specs_iter().flat_map(|s| s.fields().iter().map(|f| f.name.clone())).collect();
    let mut inference = Inference::from_table(table.current_schema(), partition_names, replaceable.to_vec());
    for value in records.filter(|r| r.value_error.is_none()).filter_map(|r| r.value.as_deref()) {
        // A conflict is found again when the record is read (`WriterPlan::read`).
        let _ = inference.add(value);
    }
    inference
}

/// How a record's value is read.
pub enum Framed<'a> {
    /// Decode `payload` with reader `usize`.
    Reader(usize, std::borrow::Cow<'a, [u8]>),
    /// A dead letter, with the reason.
    Reject(String),
}

impl WriterPlan {
    /// Plan for `records` (those not already in the tables) against `table` as loaded.
    /// Registry lookups that fail fail the plan. `replaceable`: the table's `long` columns a
    /// `schema = "infer"` batch may turn into `double`s (an ingest's direct commit replaces them,
    /// [`crate::engine::commit::replace_column`]); elsewhere none, and a fraction there is a
    /// dead letter.
    pub async fn new<'r>(
        pipeline: &Pipeline,
        registry: Option<&Registry>,
        records: impl Iterator<Item = &'r KafkaRecordIn>,
        table: &TableMetadata,
        replaceable: &[String],
    ) -> Result<Self> {
        let (current, last_column_id) = (table.current_schema().as_ref(), table.last_column_id());
        let mut candidates: Vec<(Option<WriterKey>, std::result::Result<Arc<SourceSchema>, String>)> = Vec::new();
        let mut inferred = None;
        match (registry, &pipeline.registry) {
            _ if pipeline.infer => {
                let inference = infer(table, records, replaceable);
                candidates.push((None, Ok(Arc::new(SourceSchema::Json(inference.schema())))));
                inferred = Some(inference);
            }
            (Some(registry), Some(_)) => {
                let mut seen: Vec<WriterKey> = Vec::new();
                for record in records {
                    let Some(value) = record.value.as_deref() else { continue };
                    if let Named::Key(key, _) = named(pipeline, record, value, None)
                        && !seen.contains(&key)
                    {
                        seen.push(key);
                    }
                }
                for key in seen {
                    let writer = registry.writer(key.0, key.1.as_ref(), pipeline.format, &pipeline.topics).await?;
                    let writer = if key.2 { writer.map(|w| Arc::new(w.as_json())) } else { writer };
                    candidates.push((Some(key), writer));
                }
            }
            _ => {
                candidates.push((None, Ok(Arc::new(pipeline.source.clone()))));
                // Reader 1 only for a batch the mapping validated and hands over as JSON.
                let mut records = records;
                if pipeline.format != Format::Json && records.any(|r| r.value_schema.is_some()) {
                    candidates.push((None, Ok(Arc::new(pipeline.source.as_json()))));
                }
            }
        }
        let mut plan = WriterPlan {
            writers: Vec::new(),
            readers: Vec::new(),
            plain: Ok(0),
            target: current.clone(),
            evolves: false,
            inflate: InflateBudget::per_batch(),
            inferred,
        };
        let mut last = last_column_id;
        for (key, writer) in candidates {
            let accepted = writer.and_then(|w| {
                let mut trial = last;
                // As the commit does: the replaced columns first, then the evolution.
                if let Some(schema) = replace_columns(&plan.target, w.replaced_columns(), &mut trial).map_err(|e| e.to_string())? {
                    plan.target = schema;
                    plan.evolves = true;
                    last = trial;
                }
                if let Some(schema) = evolve_table(table, &plan.target, &w, &mut trial)? {
                    plan.target = schema;
                    plan.evolves = true;
                    last = trial;
                }
                plan.writers.push(w);
                Ok(plan.writers.len() - 1)
            });
            if let Err(reason) = &accepted {
                tracing::warn!(table = %pipeline.table, writer = ?key, %reason, "writer schema refused; its records go to the dead-letter table");
            }
            match key {
                Some(key) => plan.readers.push((key, accepted)),
                // Reader 0 decides; reader 1 (the same fields as JSON) is then index 1.
                None if plan.plain.is_ok() => plan.plain = accepted.map(|_| 0),
                None => {}
            }
        }
        // The metadata columns the pipeline asks for: an existing table gains them with the rows.
        let evolved = add_kafka_columns(&plan.target, pipeline.kafka_columns, &mut last)
            .map_err(|e| Error::Schema(format!("table of pipeline `{}`: {e}", pipeline.table)))?;
        if let Some(schema) = evolved {
            plan.target = schema;
            plan.evolves = true;
        }
        Ok(plan)
    }

    /// [`Self::new`] for an ingest batch (`records` gives its records afresh): a direct commit
    /// may replace an inferred `long` column by a `double` where the table allows
    /// ([`replace_column::can_replace`], read only when a batch asks for it); queued, files
    /// staged for the old column could land after it, so a fraction there is a dead letter.
    pub async fn for_ingest<'r, I: Iterator<Item = &'r KafkaRecordIn>>(
        pipeline: &Pipeline,
        registry: Option<&Registry>,
        records: impl Fn() -> I,
        table: &Table,
        direct: bool,
    ) -> Result<Self> {
        let mut replaceable = match pipeline.infer && direct {
            true => replace_column::candidates(table.metadata()),
            false => vec![],
        };
        let plan = Self::new(pipeline, registry, records(), table.metadata(), &replaceable).await?;
        let wanted = plan.replaced_columns();
        if wanted.is_empty() {
            return Ok(plan);
        }
        let allowed = replace_column::can_replace(table, &wanted).await?;
        if allowed.len() == wanted.len() {
            return Ok(plan);
        }
        replaceable.retain(|c| !wanted.contains(c) || allowed.contains(c));
        Self::new(pipeline, registry, records(), table.metadata(), &replaceable).await
    }

    /// The `long` columns the batch's writers need as `double`s (`schema = "infer"`).
    pub fn replaced_columns(&self) -> Vec<String> {
        let mut names: Vec<String> = self.writers.iter().flat_map(|w| w.replaced_columns().iter().cloned()).collect();
        names.sort();
        names.dedup();
        names
    }

    /// How to read `value`, the value of `record` of `pipeline`.
    pub fn read<'a>(&self, pipeline: &Pipeline, record: &KafkaRecordIn, value: &'a [u8]) -> Framed<'a> {
        if let Some(Err(reason)) = self.inferred.as_ref().map(|i| i.check(value)) {
            return Framed::Reject(format!("schema: {reason}"));
        }
        if pipeline.registry.is_none() {
            // The mapping validated it and hands it over as JSON: the same schema, read as JSON.
            let as_json = record.value_schema.is_some() && pipeline.format != Format::Json && is_json_object(value);
            return match &self.plain {
                Ok(reader) => Framed::Reader(reader + usize::from(as_json), std::borrow::Cow::Borrowed(value)),
                Err(reason) => Framed::Reject(format!("schema: {reason}")),
            };
        }
        match named(pipeline, record, value, Some(&self.inflate)) {
            Named::Bad(reason) => Framed::Reject(reason),
            Named::Key(key, payload) => match self.readers.iter().find(|(k, _)| *k == key) {
                Some((_, Ok(reader))) => Framed::Reader(*reader, payload),
                Some((_, Err(reason))) => Framed::Reject(format!("schema: {reason}")),
                None => Framed::Reject(format!("registry: {} was not looked up (record not in the plan)", key.0)),
            },
        }
    }
}
