//! Which writer schema each record of a batch was written with, and the table schema that can
//! take them all: the pipeline's schema when values are plain, the registry's schema per id
//! when they are framed. Writer schemas the table cannot take (see `schema::evolve`) are kept
//! with their reason: their records become dead letters, the others still land.

use std::sync::Arc;

use iceberg::spec::{Schema, TableMetadata};

use crate::error::Result;
use crate::event::KafkaRecordIn;
use crate::pipeline::Pipeline;
use crate::registry::{MessageIndex, Registry, WriterId};
use crate::schema::SourceSchema;
use crate::schema::evolve::evolve;

/// A record's writer, as its frame names it.
type WriterKey = (WriterId, Option<MessageIndex>);

/// The batch's writer schemas and the table schema the rows are decoded into.
pub struct WriterPlan {
    /// Writer schemas the table can take, by decoder reader index.
    pub writers: Vec<Arc<SourceSchema>>,
    /// Per framed writer: its reader index, or why its records are dead letters. A batch has a
    /// handful of writers: a list compared by id is cheaper per record than hashing.
    readers: Vec<(WriterKey, std::result::Result<usize, String>)>,
    /// Plain values (no registry): the pipeline's schema is reader 0, or why the table cannot
    /// take it (a table changed since start by another engine: every record is a dead letter).
    plain: std::result::Result<usize, String>,
    /// The table's schema with every accepted writer folded in.
    pub target: Schema,
    /// Whether `target` differs from the table's current schema (the commit evolves it).
    pub evolves: bool,
}

/// [`evolve`] for a table: also refuses a new column named like one of its partition fields
/// (Iceberg would refuse the schema at commit, again on every retry).
pub fn evolve_table(table: &TableMetadata, base: &Schema, writer: &SourceSchema, last_column_id: &mut i32) -> std::result::Result<Option<Schema>, String> {
    let evolved = evolve(base, writer.fields(), last_column_id)?;
    let partition_names: Vec<&str> = table.partition_specs_iter().flat_map(|s| s.fields().iter().map(|f| f.name.as_str())).collect();
    let added = evolved.iter().flat_map(|s| s.as_struct().fields()).filter(|f| base.field_by_name(&f.name).is_none());
    if let Some(clash) = added.into_iter().find(|f| partition_names.contains(&f.name.as_str())) {
        return Err(format!("field `{}`: new in the writer schema, but the table has a partition field of that name", clash.name));
    }
    Ok(evolved)
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
    /// Registry lookups that fail fail the plan.
    pub async fn new<'r>(
        pipeline: &Pipeline,
        registry: Option<&Registry>,
        records: impl Iterator<Item = &'r KafkaRecordIn>,
        table: &TableMetadata,
    ) -> Result<Self> {
        let (current, last_column_id) = (table.current_schema().as_ref(), table.last_column_id());
        let mut candidates: Vec<(Option<WriterKey>, std::result::Result<Arc<SourceSchema>, String>)> = Vec::new();
        match (registry, &pipeline.registry) {
            (Some(registry), Some(spec)) => {
                let mut seen: Vec<WriterKey> = Vec::new();
                for record in records {
                    let Some(value) = record.value.as_deref() else { continue };
                    if let Ok(frame) = spec.frame(value, pipeline.format) {
                        let key = (frame.writer, frame.message);
                        if !seen.contains(&key) {
                            seen.push(key);
                        }
                    }
                }
                for key in seen {
                    let writer = registry.writer(key.0, key.1.as_ref(), pipeline.format).await?;
                    candidates.push((Some(key), writer));
                }
            }
            _ => candidates.push((None, Ok(Arc::new(pipeline.source.clone())))),
        }
        let mut plan = WriterPlan { writers: Vec::new(), readers: Vec::new(), plain: Ok(0), target: current.clone(), evolves: false };
        let mut last = last_column_id;
        for (key, writer) in candidates {
            let accepted = writer.and_then(|w| {
                let mut trial = last;
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
                None => plan.plain = accepted,
            }
        }
        Ok(plan)
    }

    /// How to read `value` of `pipeline`.
    pub fn read<'a>(&self, pipeline: &Pipeline, value: &'a [u8]) -> Framed<'a> {
        let Some(spec) = &pipeline.registry else {
            return match &self.plain {
                Ok(reader) => Framed::Reader(*reader, std::borrow::Cow::Borrowed(value)),
                Err(reason) => Framed::Reject(format!("schema: {reason}")),
            };
        };
        match spec.frame(value, pipeline.format) {
            Err(e) => Framed::Reject(format!("registry frame: {e}")),
            Ok(frame) => match self.readers.iter().find(|((writer, message), _)| *writer == frame.writer && *message == frame.message) {
                Some((_, Ok(reader))) => Framed::Reader(*reader, frame.payload),
                Some((_, Err(reason))) => Framed::Reject(format!("schema: {reason}")),
                None => Framed::Reject(format!("registry frame: {} was not looked up (record not in the plan)", frame.writer)),
            },
        }
    }
}
