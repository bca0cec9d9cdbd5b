//! The upsert mode (`mode = "upsert"`): one upsert pipeline's share of an event. Records are
//! unwrapped by the pipeline's envelope ([`envelope`]; registry writers: [`registry_envelopes`],
//! [`registry_rows`]) and decoded into rows (inserts, updates) and key images (deletes);
//! rejects go into the dead-letter table, every change into `<table>_changelog` when asked
//! ([`changelog`]), then the keyed engine's guarded apply to the table
//! ([`crate::engine::keyed::apply`]). Each table commits exactly once by offsets; a crash between two
//! commits is repaired by the replay. [`layout`]: the key layout an upsert table keeps;
//! [`rebuild`]: the table recomputed from its changelog.

pub mod changelog;
pub mod envelope;
pub mod layout;
pub mod rebuild;
pub mod registry_envelopes;
pub mod registry_rows;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, RecordBatch, StringArray, new_null_array};
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use arrow_select::concat::concat;

use iceberg::TableIdent;
use iceberg::table::Table;
use serde::Serialize;

use self::changelog::ChangelogAppend;
use self::envelope::Op;
use self::envelope::{Unwrapped, Unwrapper};
use self::registry_envelopes::RegistryEnvelopes;
use self::registry_rows::RegistryRows;
use crate::base::error::Result;
use crate::decode::RecordDecoder;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::Watermarks;
use crate::engine::keyed::apply::{KeyedApply, KeyedChanges, Truncate};
use crate::engine::keyed::key_index::KeyIndexCache;
use crate::engine::keyed::stats::ApplyStats;
use crate::model::config::{Config, FailPoint};
use crate::model::event::{KafkaRecordIn, TopicPartition};
use crate::model::pipeline::upsert::{Envelope, OPERATION, Upsert};
use crate::model::pipeline::{Pipeline, format_name};
use crate::model::registry::Registry;
use crate::model::schema::SourceSchema;
use crate::model::schema::json_schema::JsonSchema;
use crate::modes::dead_letter::DeadLetterBuilder;
use crate::modes::lineage::Lineage;
use crate::modes::records::{TakeRecords, take_new_records};
use crate::modes::recovery::dead_lettered_offsets;
use crate::modes::sink::{Append, AppendSink, EvolveSchema};
use crate::modes::writer_plan::Framed;

pub use crate::model::tables::is_written_by_icestream;

/// A registry pipeline's writers of one batch.
pub enum RegistryWriters {
    /// Debezium envelopes (their rows are read by the reader of the same index).
    Envelopes(RegistryEnvelopes),
    /// Rows of a keyed topic (`envelope = "row"`), and its framed keys.
    Rows(RegistryRows),
}

impl RegistryWriters {
    /// The rows' writer schemas, by reader index.
    fn rows(&self) -> &[Arc<SourceSchema>] {
        match self {
            RegistryWriters::Envelopes(e) => &e.rows,
            RegistryWriters::Rows(r) => &r.values.writers,
        }
    }

    /// Whether the table takes a newer writer's columns first.
    fn evolves(&self) -> bool {
        match self {
            RegistryWriters::Envelopes(e) => e.evolves,
            RegistryWriters::Rows(r) => r.values.evolves,
        }
    }
}

/// Decodes one upsert pipeline's records.
pub struct UpsertDecoder<'p> {
    pipeline: &'p Pipeline,
    unwrapper: Unwrapper,
    /// Registry pipelines: each record's writer.
    writers: Option<RegistryWriters>,
    rows: RecordDecoder,
    row_ops: Vec<Op>,
    row_lineage: Lineage,
    /// Key (and order column) images of deletes.
    deletes: RecordDecoder,
    delete_lineage: Lineage,
    /// The table's schema and the deletes' (key, order column, lineage).
    data_schema: SchemaRef,
    delete_schema: SchemaRef,
    pub rejects: DeadLetterBuilder,
    /// Truncates (`allow_truncate`).
    truncates: Vec<Truncate>,
    /// Records that change no row (Kafka tombstones after a delete, DMS control records).
    pub control: usize,
    pub skipped_replay: usize,
}

/// Schema of the deletes batch: key columns, the order column, lineage, source position.
fn delete_schema(data: &ArrowSchema, key: &[String], upsert: &Upsert) -> SchemaRef {
    let wanted = |name: &str| key.iter().any(|k| k == name) || name == upsert.order_column() || is_written_by_icestream(name);
    let fields: Vec<_> = data.fields().iter().filter(|f| wanted(f.name())).cloned().collect();
    Arc::new(ArrowSchema::new(fields))
}

impl<'p> UpsertDecoder<'p> {
    /// `writers`: a registry pipeline's writers for this batch.
    pub fn new(
        pipeline: &'p Pipeline,
        upsert: &Upsert,
        data_schema: SchemaRef,
        rejected_at_us: i64,
        writers: Option<RegistryWriters>,
    ) -> Result<Self> {
        let decoded = |schema: &ArrowSchema| {
            Arc::new(ArrowSchema::new(schema.fields().iter().filter(|f| !is_written_by_icestream(f.name())).cloned().collect::<Vec<_>>()))
        };
        let precision = pipeline.timestamp_precision;
        let rows = match &writers {
            Some(w) => {
                RecordDecoder::with_precision(&w.rows().iter().map(AsRef::as_ref).collect::<Vec<_>>(), decoded(&data_schema), precision)?
            }
            None => RecordDecoder::with_precision(&[&pipeline.source], decoded(&data_schema), precision)?,
        };
        let delete_schema = delete_schema(&data_schema, &pipeline.key, upsert);
        // Key images are JSON objects (a Debezium `before`, DMS `data`, a JSON record key) of
        // the source's key and order fields, whatever the values' format.
        let image_fields = pipeline.source.fields().iter().filter(|f| delete_schema.field_with_name(&f.name).is_ok()).cloned().collect();
        let deletes = RecordDecoder::new(&SourceSchema::Json(JsonSchema::of_fields(image_fields)), decoded(&delete_schema))?;
        Ok(Self {
            pipeline,
            unwrapper: Unwrapper::new(upsert.envelope, &upsert.order, &data_schema, &pipeline.key, upsert.decimal_handling)
                .with_truncate(upsert.allow_truncate)
                .with_timestamp_precision(precision),
            writers,
            rows,
            row_ops: Vec::new(),
            row_lineage: Lineage::default(),
            deletes,
            delete_lineage: Lineage::default(),
            data_schema,
            delete_schema,
            rejects: DeadLetterBuilder::new(rejected_at_us, &format!("{}-{}", format_name(pipeline.format), upsert.envelope)),
            truncates: Vec::new(),
            control: 0,
            skipped_replay: 0,
        })
    }

    /// Decode every record not in `skip` (held by the tables, or already dead-lettered).
    pub fn decode(&mut self, partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>, skip: impl Fn(&TopicPartition, i64) -> bool) {
        let held = |tp: &TopicPartition| {
            let tp = tp.clone();
            let skip = &skip;
            move |offset| skip(&tp, offset)
        };
        self.skipped_replay += take_new_records(partitions, held, self);
    }

    fn push_change(&mut self, tp: &TopicPartition, record: &KafkaRecordIn) -> std::result::Result<(), String> {
        if let Some(e) = &record.value_error {
            return Err(e.to_string());
        }
        let (change, reader) = match (&self.writers, record.value.as_deref()) {
            (Some(RegistryWriters::Envelopes(envelopes)), Some(value)) => {
                let (reader, envelope, payload) = envelopes.read(record, value)?;
                (self.unwrapper.debezium_framed(envelope, &payload)?, reader)
            }
            (Some(RegistryWriters::Rows(rows)), Some(value)) => match rows.values.read(self.pipeline, record, value) {
                Framed::Reader(reader, payload) => return self.push_row(reader, &payload, Op::Update, tp, record.offset, None),
                Framed::Reject(reason) => return Err(reason),
            },
            (Some(RegistryWriters::Rows(rows)), None) => match record.key.as_deref().and_then(|key| rows.key_json(key)) {
                Some(key) => (self.unwrapper.delete_of_key(key?)?, 0),
                None => (self.unwrapper.unwrap(record.key.as_deref(), None)?, 0),
            },
            _ => (self.unwrapper.unwrap(record.key.as_deref(), record.value.as_deref())?, 0),
        };
        match change {
            Unwrapped::Control => self.control += 1,
            Unwrapped::Truncate { position } => self.truncates.push(Truncate { position, tp: tp.clone(), offset: record.offset }),
            Unwrapped::Raw(row) => self.push_row(reader, row, Op::Update, tp, record.offset, None)?,
            Unwrapped::Upsert { row, op, position } => self.push_row(reader, &row, op, tp, record.offset, position)?,
            Unwrapped::Delete { image, position } => {
                self.deletes.append(&image)?;
                self.delete_lineage.append_sourced(tp, record.offset, position);
            }
        }
        Ok(())
    }

    fn push_row(
        &mut self,
        reader: usize,
        row: &[u8],
        op: Op,
        tp: &TopicPartition,
        offset: i64,
        position: Option<i64>,
    ) -> std::result::Result<(), String> {
        self.rows.append_as(reader, row)?;
        self.row_ops.push(op);
        self.row_lineage.append_sourced(tp, offset, position);
        Ok(())
    }

    /// The rows (table schema) and deletes (key, order, lineage) decoded so far, with the
    /// operation of each row, and the truncates.
    pub fn finish(&mut self) -> Result<(RecordBatch, RecordBatch, Vec<Op>, Vec<Truncate>)> {
        let rows = self.row_lineage.batch(self.data_schema.clone(), self.rows.finish()?)?;
        let deletes = self.delete_lineage.batch(self.delete_schema.clone(), self.deletes.finish()?)?;
        Ok((rows, deletes, std::mem::take(&mut self.row_ops), std::mem::take(&mut self.truncates)))
    }
}

impl TakeRecords for UpsertDecoder<'_> {
    fn take(&mut self, tp: &TopicPartition, record: &KafkaRecordIn) -> std::result::Result<(), String> {
        self.push_change(tp, record)
    }

    fn rejects(&mut self) -> &mut DeadLetterBuilder {
        &mut self.rejects
    }
}

/// The changelog rows of a batch: `operation`, then the rows' columns; deletes carry their
/// key, order and lineage columns, the rest null.
pub fn changelog_rows(schema: SchemaRef, rows: &RecordBatch, ops: &[Op], deletes: &RecordBatch) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column: ArrayRef = if field.name() == OPERATION {
            let codes = ops.iter().map(|op| op.code()).chain(std::iter::repeat_n(Op::Delete.code(), deletes.num_rows()));
            Arc::new(StringArray::from_iter_values(codes))
        } else {
            let from_rows =
                rows.column_by_name(field.name()).cloned().unwrap_or_else(|| new_null_array(field.data_type(), rows.num_rows()));
            let from_deletes =
                deletes.column_by_name(field.name()).cloned().unwrap_or_else(|| new_null_array(field.data_type(), deletes.num_rows()));
            concat(&[from_rows.as_ref(), from_deletes.as_ref()])?
        };
        columns.push(column);
    }
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Whether every table of the pipeline holds `offset` (or the dead-letter table does).
pub fn held_everywhere<'a>(
    marks: &'a [Watermarks],
    dead_lettered: &'a HashMap<TopicPartition, HashSet<i64>>,
) -> impl Fn(&TopicPartition, i64) -> bool + 'a {
    move |tp, offset| marks.iter().all(|m| m.covers(tp, offset)) || dead_lettered.get(tp).is_some_and(|held| held.contains(&offset))
}

/// An upsert pipeline's tables, as opened at start.
pub struct UpsertTables<'a> {
    pub pipeline: &'a Pipeline,
    pub upsert: &'a Upsert,
    pub data: &'a TableIdent,
    pub dead_letter: &'a TableIdent,
    pub dead_letter_schema: SchemaRef,
    /// `<table>_changelog`, when the pipeline keeps one.
    pub changelog: Option<&'a TableIdent>,
    /// The pipeline's registry client, when its values are framed.
    pub registry: Option<&'a Registry>,
    /// Data files' footers and key page indexes kept across batches.
    pub key_index: &'a Arc<KeyIndexCache>,
}

/// What one upsert pipeline did with its share of an event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpsertOutcome {
    pub changes: usize,
    pub control: usize,
    pub dead_letter: usize,
    pub skipped_replay: usize,
    pub changelog_written: usize,
    /// Records the event carried twice, kept once in the changelog.
    pub duplicates: usize,
    pub apply: ApplyStats,
    pub files: usize,
    pub bytes: u64,
    pub commit_attempts: u32,
    pub commit_ms: u64,
    /// The table's new snapshot, if it changed.
    pub snapshot_id: Option<i64>,
    pub oldest_timestamp_ms: Option<i64>,
}

/// First and last offset per topic-partition, and the oldest Kafka timestamp.
fn ranges_of(partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>) -> (BTreeMap<TopicPartition, (i64, i64)>, Option<i64>) {
    let ranges =
        partitions.iter().filter_map(|(tp, records)| Some((tp.clone(), (records.first()?.offset, records.last()?.offset)))).collect();
    (ranges, partitions.values().flatten().map(|r| r.timestamp_ms).min())
}

/// The data table and changelog of an upsert pipeline, with a registry pipeline's writers of
/// `partitions` (their new columns committed to both tables first).
pub struct Loaded {
    pub data: Table,
    pub changelog: Option<Table>,
    pub writers: Option<RegistryWriters>,
}

/// Load the data table and the changelog for `partitions` (ingest, and a dead-letter replay);
/// `evolve`: commit the writers' new columns (not in a dry run).
pub async fn load_tables(
    catalogs: &Catalogs,
    tables: &UpsertTables<'_>,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    evolve: bool,
    deadline: Instant,
) -> Result<Loaded> {
    let catalog = catalogs.catalog();
    let mut data_table = catalog.load_table(tables.data).await?;
    let mut changelog_table = match tables.changelog {
        Some(ident) => Some(catalog.load_table(ident).await?),
        None => None,
    };
    let writers = match tables.registry {
        Some(registry) => {
            let writers = match tables.upsert.envelope {
                Envelope::Row => {
                    RegistryWriters::Rows(RegistryRows::plan(registry, tables.pipeline, partitions, data_table.metadata()).await?)
                }
                _ => {
                    RegistryWriters::Envelopes(RegistryEnvelopes::plan(registry, tables.pipeline, partitions, data_table.metadata()).await?)
                }
            };
            if evolve && writers.evolves() {
                // A newer writer's columns land first, in commits of their own (as at start):
                // the decoder, the guarded apply and the changelog then read one schema.
                let mut evolve = EvolveSchema { writers: writers.rows(), kafka: Default::default() };
                data_table = catalogs.committer.commit_to(data_table, deadline, &mut evolve).await?.table;
                if let Some(table) = changelog_table.take() {
                    changelog_table = Some(catalogs.committer.commit_to(table, deadline, &mut evolve).await?.table);
                }
            }
            Some(writers)
        }
        None => None,
    };
    Ok(Loaded { data: data_table, changelog: changelog_table, writers })
}

/// The decoder of `tables`' records into `data`'s schema as it is now (another engine may have
/// changed it since start).
pub fn decoder_for<'p>(tables: &UpsertTables<'p>, data: &Table, writers: Option<RegistryWriters>) -> Result<UpsertDecoder<'p>> {
    let data_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(data.metadata().current_schema())?);
    UpsertDecoder::new(tables.pipeline, tables.upsert, data_schema, chrono::Utc::now().timestamp_micros(), writers)
}

/// Dead letters, then the changelog, then the guarded apply: each table loaded once, each
/// commit exactly once by offsets.
pub async fn ingest(
    catalogs: &Catalogs,
    config: &Config,
    sink: &AppendSink,
    tables: UpsertTables<'_>,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    deadline: Instant,
) -> Result<UpsertOutcome> {
    let dead_letter_table = catalogs.catalog().load_table(tables.dead_letter).await?;
    let Loaded { data: data_table, changelog: changelog_table, writers } =
        load_tables(catalogs, &tables, partitions, true, deadline).await?;
    let data_marks = Watermarks::from_properties(data_table.metadata().properties());
    let dead_letter_marks = Watermarks::from_properties(dead_letter_table.metadata().properties());
    let mut marks = vec![data_marks.clone()];
    marks.extend(changelog_table.iter().map(|t| Watermarks::from_properties(t.metadata().properties())));
    let dead_lettered = dead_lettered_offsets(&dead_letter_table, partitions, &data_marks, &dead_letter_marks).await?;
    let (ranges, oldest_timestamp_ms) = ranges_of(partitions);

    let mut decoder = decoder_for(&tables, &data_table, writers)?;
    decoder.decode(partitions, held_everywhere(&marks, &dead_lettered));
    let (rows, deletes, ops, truncates) = decoder.finish()?;
    let mut out = UpsertOutcome {
        changes: rows.num_rows() + deletes.num_rows() + truncates.len(),
        control: decoder.control,
        skipped_replay: decoder.skipped_replay,
        oldest_timestamp_ms,
        ..Default::default()
    };

    // Dead letters first: if we crash before the other commits, the replay finds them.
    let rejects = std::mem::replace(&mut decoder.rejects, DeadLetterBuilder::new(0, "")).finish(tables.dead_letter_schema.clone())?;
    let started = Instant::now();
    let append = Append {
        ident: tables.dead_letter,
        table: Some(dead_letter_table),
        rows: rejects,
        ranges: &ranges,
        oldest_record_ms: oldest_timestamp_ms,
        writers: vec![],
        record_times: None,
        deduped: Default::default(),
    };
    let appended = sink.append(catalogs, config, append, deadline).await?;
    out.commit_ms += started.elapsed().as_millis() as u64;
    out.commit_attempts += appended.commit_attempts;
    out.dead_letter = appended.rows;
    out.files += appended.files;
    out.bytes += appended.bytes;

    let key = &tables.pipeline.key;
    let order = tables.upsert.order_column();
    if let Some(table) = changelog_table {
        let started = Instant::now();
        let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
        let batch = changelog_rows(schema, &rows, &ops, &deletes)?;
        let mut planner = ChangelogAppend::new(batch, ranges.clone(), &config.compression, config.target_file_size_bytes)?
            .with_truncate(truncates.iter().map(Truncate::rank).max());
        let outcome = catalogs.committer.commit_to(table, deadline, &mut planner).await?;
        out.commit_ms += started.elapsed().as_millis() as u64;
        out.commit_attempts += outcome.attempts;
        out.duplicates = planner.duplicates;
        if outcome.committed {
            out.changelog_written = planner.append().rows_planned;
            out.files += planner.append().files_planned;
        }
    }
    if config.fail_point == FailPoint::AfterCommit {
        crate::base::failpoint::abort("after-commit (changelog committed, upsert table not)");
    }

    // The guarded apply runs even with no change left, so the table's watermarks stay
    // contiguous over dead letters and control records.
    let started = Instant::now();
    let mut planner = KeyedApply::new(
        KeyedChanges { rows, deletes, truncates },
        key,
        order,
        &ranges,
        &config.compression,
        config.target_file_size_bytes,
    )?
    .with_key_index(tables.key_index.clone());
    let outcome = catalogs.committer.commit_to(data_table, deadline, &mut planner).await?;
    out.commit_ms += started.elapsed().as_millis() as u64;
    out.commit_attempts += outcome.attempts;
    out.apply = planner.stats;
    out.snapshot_id = outcome.snapshot_id;
    if outcome.committed {
        out.files += out.apply.data_files + out.apply.delete_files;
    }
    Ok(out)
}
