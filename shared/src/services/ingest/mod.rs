//! The ingest entry point shared by the Lambda function and `icestream ingest`: one MSK event
//! in; each record routed by its topic to the pipeline that claims it; rows in the pipeline's
//! table, rejects in its dead-letter table, one commit per table.

mod summary;

pub use summary::{Summary, TableMetrics};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use iceberg::TableIdent;
use iceberg::table::Table;
use tracing::Instrument;

use crate::base::error::{Error, Result};
use crate::decode::RecordDecoder;
use crate::engine::catalog::Catalogs;
use crate::engine::commit::Watermarks;
use crate::engine::commit::gaps::TakenGaps;
use crate::engine::keyed::key_index::KeyIndexCache;
use crate::model::config::{CommitMode, Config, Dedup, FailPoint};
use crate::model::event::{KafkaRecordIn, ParsedEvent, TopicPartition, parse_event};
use crate::model::pipeline::{Pipeline, PipelineSet};
use crate::model::registry::Registry;
use crate::model::schema::SourceSchema;
use crate::model::tables::kafka::KafkaColumns;
use crate::model::tables::{is_written_by_icestream, lineage};
use crate::modes::records::{Marks, decode_partitions};
use crate::modes::recovery::dead_lettered_offsets;
use crate::modes::sink::{Append, AppendSink};
use crate::modes::upsert::UpsertTables;
use crate::modes::writer_plan::{WriterPlan, evolve_table};

/// One pipeline's tables as found at start. The data table's schema is read per invocation:
/// it evolves.
pub(crate) struct PipelineTables {
    pub(crate) data: TableIdent,
    pub(crate) dead_letter: TableIdent,
    pub(crate) dead_letter_schema: SchemaRef,
    /// The pipeline's registry client (its cache lives as long as the container).
    pub(crate) registry: Option<Registry>,
    /// `<table>_changelog` of an upsert pipeline that keeps one.
    pub(crate) changelog: Option<TableIdent>,
    /// The data and dead-letter tables as the last queued invocation left them.
    pub(crate) reuse: TableReuse,
}

/// A queued writer reuses its tables for this long instead of loading them per invocation
/// (two sequential round trips). What it misses in the meantime costs nothing but work: the
/// committer drops or trims rows below the watermarks it finds, a schema commit against a stale
/// table conflicts and reloads, and the files carry field ids any later schema reads.
const TABLE_REUSE: std::time::Duration = std::time::Duration::from_secs(60);

/// The (data, dead-letter) tables of a pipeline and when they were loaded from the catalog.
/// Taken out for an invocation and put back only when it succeeds: after a failure the retry
/// loads them afresh.
#[derive(Default)]
pub(crate) struct TableReuse(std::sync::Mutex<Option<(Table, Table, Instant)>>);

impl TableReuse {
    fn take_fresh(&self) -> Option<(Table, Table, Instant)> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take().filter(|(_, _, at)| at.elapsed() < TABLE_REUSE)
    }

    fn put(&self, data: Table, dead_letter: Table, loaded_at: Instant) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((data, dead_letter, loaded_at));
    }
}

/// Config, catalog and pipelines: built once per process, reused per invocation.
pub struct IngestPipeline {
    config: Config,
    catalogs: Catalogs,
    sink: AppendSink,
    set: PipelineSet,
    tables: Vec<PipelineTables>,
    /// Pipelines of topics a table-per-topic pattern claimed since start, by topic, with their
    /// tables (created when first seen).
    instances: tokio::sync::Mutex<BTreeMap<String, Arc<(Pipeline, PipelineTables)>>>,
    /// Upsert pipelines' data files' footers and key page indexes, kept while the process is.
    key_index: Arc<KeyIndexCache>,
}

/// Where one topic's records go: a pipeline of the file, or one a pattern made for the topic.
enum Target {
    Pipeline(usize),
    Instance(Arc<(Pipeline, PipelineTables)>),
}

impl IngestPipeline {
    /// Load the pipelines, connect to the catalog, create missing tables and check that every
    /// existing one can take its pipeline's records (refused at start, nothing written).
    pub async fn new(mut config: Config) -> Result<Self> {
        let set = PipelineSet::from_config(&config).await?;
        config.namespace = set.namespace.clone();
        let catalogs = Catalogs::connect(&config).await?;
        let mut tables = Vec::with_capacity(set.pipelines.len());
        for pipeline in &set.pipelines {
            let registry = match &pipeline.registry {
                Some(spec) => Some(Registry::connect(spec, config.registry_auth.as_ref().map(|a| a.expose())).await?),
                None => None,
            };
            tables.push(open_tables(&catalogs, pipeline, registry).await?);
        }
        let sink = AppendSink::from_config(&config).await;
        let key_index = Arc::new(KeyIndexCache::new(config.key_index_cache_bytes));
        Ok(Self { config, catalogs, sink, set, tables, instances: Default::default(), key_index })
    }

    /// The pipeline and tables of a topic a table-per-topic pattern claims, made (and its
    /// tables created) the first time the topic is seen; `None`: no pattern claims it.
    async fn instance(&self, topic: &str) -> Result<Option<Arc<(Pipeline, PipelineTables)>>> {
        let mut instances = self.instances.lock().await;
        if let Some(known) = instances.get(topic) {
            return Ok(Some(known.clone()));
        }
        let taken: BTreeMap<String, String> = instances.iter().map(|(topic, i)| (i.0.table.clone(), topic.clone())).collect();
        let Some(pipeline) = self.set.instantiate(topic, &taken, &self.config).await? else { return Ok(None) };
        let registry = match &pipeline.registry {
            Some(spec) => Some(Registry::connect(spec, self.config.registry_auth.as_ref().map(|a| a.expose())).await?),
            None => None,
        };
        let tables = open_tables(&self.catalogs, &pipeline, registry).await?;
        // Another process may have made the table for another topic of the same name.
        let data = self.catalogs.catalog().load_table(&tables.data).await?;
        if let Some(other) = Watermarks::from_properties(data.metadata().properties()).0.keys().map(|tp| &tp.topic).find(|t| *t != topic) {
            return Err(Error::Routing(format!(
                "topic {topic:?} maps to table `{}`, which topic {other:?} already writes",
                pipeline.table
            )));
        }
        let made = Arc::new((pipeline, tables));
        instances.insert(topic.to_string(), made.clone());
        Ok(Some(made))
    }

    /// [`Self::instance`] for a topic whose table exists already (`None`: no pattern claims
    /// the topic, or its table was never made): recovering its records creates nothing.
    pub(crate) async fn existing_instance(&self, topic: &str) -> Result<Option<Arc<(Pipeline, PipelineTables)>>> {
        let Some(table) = self.set.pattern_table(topic) else { return Ok(None) };
        if !self.catalogs.catalog().table_exists(&self.catalogs.ident(&table)).await? {
            return Ok(None);
        }
        self.instance(topic).await
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn catalogs(&self) -> &Catalogs {
        &self.catalogs
    }

    /// The catalogs, to swap in a fault-injecting catalog and pointer (the simulation,
    /// `tests/sim.rs`); never in the functions.
    #[cfg(feature = "fault-injection")]
    pub fn catalogs_mut(&mut self) -> &mut Catalogs {
        &mut self.catalogs
    }

    pub fn pipelines(&self) -> &PipelineSet {
        &self.set
    }

    /// The pipeline writing `table`, with its tables as loaded at start (dead-letter replay
    /// decodes with exactly what ingest uses).
    pub(crate) fn pipeline_of(&self, table: &str) -> Option<(&Pipeline, &PipelineTables)> {
        let index = self.set.pipelines.iter().position(|p| p.table == table)?;
        Some((&self.set.pipelines[index], &self.tables[index]))
    }

    /// The pipeline of a table a table-per-topic pattern made, found by the topic its
    /// watermarks (or its dead-letter table's) name: a dead-letter replay in a process that has
    /// not seen the topic. `None`: no pattern names the table, or it has no watermark yet.
    pub(crate) async fn pattern_pipeline_of(&self, table: &str) -> Result<Option<Arc<(Pipeline, PipelineTables)>>> {
        let patterns = self.set.templates.iter().filter(|t| t.topic_pattern.is_some());
        if !patterns.clone().any(|t| crate::model::pipeline::template::names(&t.table, table)) {
            return Ok(None);
        }
        for name in [table.to_string(), crate::model::tables::dead_letter_name(table)] {
            let Ok(loaded) = self.catalogs.catalog().load_table(&self.catalogs.ident(&name)).await else { continue };
            let marks = Watermarks::from_properties(loaded.metadata().properties());
            if let Some(tp) = marks.0.keys().next() {
                return self.instance(&tp.topic).await;
            }
        }
        Ok(None)
    }

    /// Handle a raw event (JSON bytes).
    pub async fn handle_json(&self, json: &[u8], deadline: Instant) -> Result<Summary> {
        self.handle(parse_event(json)?, deadline).await
    }

    /// Handle a parsed event: route every topic first (an unclaimed topic fails the invocation
    /// before anything is written), then each pipeline's records in turn.
    pub async fn handle(&self, event: ParsedEvent, deadline: Instant) -> Result<Summary> {
        let started = Instant::now();
        let calls_before = self.catalogs.calls();
        let payload_bytes = event.partitions.values().flatten().map(|r| r.payload_len() as u64).sum();
        let mut summary = Summary { records: event.record_count(), payload_bytes, ..Default::default() };
        // By pipeline index, then the patterns' topics after them, in topic order.
        let mut routed: BTreeMap<(usize, String), (Target, BTreeMap<TopicPartition, Vec<KafkaRecordIn>>)> = BTreeMap::new();
        for (tp, records) in event.partitions {
            let (key, target) = match self.set.route(&tp.topic) {
                Ok(index) => ((index, String::new()), Target::Pipeline(index)),
                Err(unclaimed) => match self.instance(&tp.topic).await? {
                    Some(instance) => ((usize::MAX, tp.topic.clone()), Target::Instance(instance)),
                    None => return Err(unclaimed),
                },
            };
            routed.entry(key).or_insert_with(|| (target, BTreeMap::new())).1.insert(tp, records);
        }
        let mut oldest: Option<i64> = None;
        for (target, partitions) in routed.into_values() {
            let (pipeline, tables) = match &target {
                Target::Pipeline(index) => (&self.set.pipelines[*index], &self.tables[*index]),
                Target::Instance(instance) => (&instance.0, &instance.1),
            };
            // Every log line about this share of the batch names the table and the offsets.
            let span = tracing::info_span!("batch", table = %tables.data, offsets = %offset_ranges(&partitions));
            let pipeline_oldest = self.ingest_pipeline(pipeline, tables, partitions, deadline, &mut summary).instrument(span).await?;
            oldest = match (oldest, pipeline_oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            summary.tables += 1;
        }
        if self.config.fail_point == FailPoint::AfterCommit {
            crate::base::failpoint::abort("after-commit");
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        summary.max_record_age_ms = oldest.map(|t| (now_ms - t).max(0)).unwrap_or(0);
        summary.duration_ms = started.elapsed().as_millis() as u64;
        summary.round_trips = self.catalogs.calls() - calls_before;
        Ok(summary)
    }

    /// One pipeline's share of the event: decode what its tables do not hold yet, dedup, then
    /// dead letters and rows, one commit each. Returns the oldest record's timestamp.
    async fn ingest_pipeline(
        &self,
        pipeline: &Pipeline,
        tables: &PipelineTables,
        partitions: BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
        deadline: Instant,
        summary: &mut Summary,
    ) -> Result<Option<i64>> {
        if let Some(upsert) = &pipeline.upsert {
            return self.ingest_upserts(pipeline, upsert, tables, &partitions, deadline, summary).await;
        }
        let (data_table, dead_letter_table, loaded_at) = self.tables_of(pipeline, tables).await?;
        let data_marks = Watermarks::from_properties(data_table.metadata().properties());
        let dead_letter_marks = Watermarks::from_properties(dead_letter_table.metadata().properties());
        let dead_lettered = dead_lettered_offsets(&dead_letter_table, &partitions, &data_marks, &dead_letter_marks).await?;

        // Each record's writer schema, and the table schema that takes them all (evolved in the
        // data commit below).
        let data_gaps = TakenGaps::from_properties(data_table.metadata().properties());
        let dead_letter_gaps = TakenGaps::from_properties(dead_letter_table.metadata().properties());
        let queued = matches!(self.config().commit_mode, CommitMode::Queued { .. });
        let marks = Marks {
            data: &data_marks,
            open_gaps: &data_gaps,
            dead_letter: queued.then_some((&dead_letter_marks, &dead_letter_gaps)),
            dead_lettered: &dead_lettered,
        };
        let marks_ref = &marks;
        let unseen = || {
            partitions.iter().flat_map(|(tp, records)| {
                let holds = marks_ref.of(tp);
                records.iter().filter(move |r| !holds(r.offset))
            })
        };
        let calls_before = tables.registry.as_ref().map_or(0, Registry::calls);
        let plan = WriterPlan::for_ingest(pipeline, tables.registry.as_ref(), unseen, &data_table, !queued).await?;
        summary.registry_calls += tables.registry.as_ref().map_or(0, Registry::calls) - calls_before;
        let data_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(&plan.target)?);
        let decoded_fields: Vec<_> = data_schema.fields().iter().filter(|f| !is_written_by_icestream(f.name())).cloned().collect();
        let writers: Vec<&SourceSchema> = plan.writers.iter().map(|w| w.as_ref()).collect();
        let decoder = RecordDecoder::with_precision(&writers, Arc::new(ArrowSchema::new(decoded_fields)), pipeline.timestamp_precision)?;
        let mut decoded = decode_partitions(pipeline, &plan, decoder, &partitions, &marks, self.now_us())?;
        // Decoded (dead letters keep their own copy): the records' bytes are not needed again.
        drop(partitions);
        summary.skipped_replay += decoded.skipped_replay;
        summary.tombstones += decoded.tombstones;
        summary.schema_rejects += decoded.schema_rejects;
        let mut rows = decoded.rows(data_schema)?;
        let rejects = decoded.rejects.finish(tables.dead_letter_schema.clone())?;
        let before_dedup = (pipeline.dedup != Dedup::None).then(|| rows.clone());
        if pipeline.dedup != Dedup::None {
            let (kept, dropped) = crate::modes::dedup::dedup_batch(&rows, &pipeline.key)?;
            rows = kept;
            summary.duplicates += dropped;
        }
        if let (Dedup::Window, Some(event_time)) = (pipeline.dedup, &pipeline.event_time) {
            let (kept, dropped) =
                crate::modes::window::drop_seen(&data_table, &rows, &pipeline.key, event_time, pipeline.dedup_window_minutes).await?;
            rows = kept;
            summary.duplicates += dropped;
        }
        // Neither table will hold the dropped offsets: the data commit records them for the audit.
        let deduped = match &before_dedup {
            Some(before) => crate::modes::dedup::dropped(before, &rows)?,
            None => Default::default(),
        };

        // Dead letters first: if we crash between the two commits, the replay finds them by
        // the dead-letter watermark and keeps every offset in exactly one table.
        // Queued mode sends a request even with no row left, so the watermarks stay contiguous.
        // Each table was loaded once above: that load starts its commit.
        let schema_before = data_table.metadata().current_schema_id();
        let appends = [
            (&tables.dead_letter, dead_letter_table, rejects, vec![], Default::default()),
            (&tables.data, data_table, rows, plan.writers.clone(), deduped),
        ];
        let mut metrics = TableMetrics { table: tables.data.name().to_string(), ..Default::default() };
        let appends = appends
            .into_iter()
            .map(|(ident, table, rows, writers, deduped)| Append {
                ident,
                table: Some(table),
                rows,
                ranges: &decoded.ranges,
                oldest_record_ms: decoded.oldest_timestamp_ms,
                record_times: Some(&decoded.record_times),
                writers,
                deduped,
            })
            .collect();
        let commit_started = Instant::now();
        let appended = self.sink.append_all(&self.catalogs, &self.config, appends, deadline).await?;
        summary.commit_ms += commit_started.elapsed().as_millis() as u64;
        let mut left = Vec::with_capacity(2);
        for (is_data, (appended, table)) in [false, true].into_iter().zip(appended) {
            left.extend(table);
            summary.commit_attempts += appended.commit_attempts;
            summary.files += appended.files;
            summary.bytes += appended.bytes;
            summary.skipped_replay += appended.skipped_replay;
            summary.commit_requests += appended.requests_sent;
            if is_data {
                summary.written += appended.rows;
                metrics.written = appended.rows;
                metrics.freshness = appended.freshness;
                if appended.schema_id.is_some_and(|id| id != schema_before) {
                    summary.schema_changes += 1;
                }
            } else {
                summary.dead_letter += appended.rows;
                metrics.dead_letter = appended.rows;
            }
            if appended.snapshot_id.is_some() {
                summary.snapshot_id = appended.snapshot_id;
            }
        }
        // Queued: the tables as the sink left them, for the next invocation.
        if let Ok([dead_letter, data]) = <[Table; 2]>::try_from(left) {
            tables.reuse.put(data, dead_letter, loaded_at);
        }
        tracing::info!(table = %metrics.table, written = metrics.written, dead_letter = metrics.dead_letter, "table committed");
        summary.table_metrics.push(metrics);
        Ok(decoded.oldest_timestamp_ms)
    }

    /// The pipeline's data and dead-letter tables, loaded side by side (one round trip) or, by
    /// a queued writer, as it left them within [`TABLE_REUSE`]. Not with `dedup = "window"`:
    /// it reads the table for keys seen lately.
    async fn tables_of(&self, pipeline: &Pipeline, tables: &PipelineTables) -> Result<(Table, Table, Instant)> {
        let reuse = matches!(self.sink, AppendSink::Queued(_)) && pipeline.dedup != Dedup::Window;
        if let Some(fresh) = reuse.then(|| tables.reuse.take_fresh()).flatten() {
            return Ok(fresh);
        }
        let loaded_at = Instant::now();
        let catalog = self.catalogs.catalog();
        let (data, dead_letter) = futures::try_join!(catalog.load_table(&tables.data), catalog.load_table(&tables.dead_letter))?;
        Ok((data, dead_letter, loaded_at))
    }

    /// An upsert pipeline's tables, for its guarded apply (ingest, a dead-letter replay).
    pub(crate) fn upsert_tables<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        upsert: &'a crate::model::pipeline::upsert::Upsert,
        tables: &'a PipelineTables,
    ) -> UpsertTables<'a> {
        UpsertTables {
            pipeline,
            upsert,
            data: &tables.data,
            dead_letter: &tables.dead_letter,
            dead_letter_schema: tables.dead_letter_schema.clone(),
            changelog: tables.changelog.as_ref(),
            registry: tables.registry.as_ref(),
            key_index: &self.key_index,
        }
    }

    /// An upsert pipeline's share: the guarded apply (`upsert`). Returns the oldest
    /// record's timestamp.
    async fn ingest_upserts(
        &self,
        pipeline: &Pipeline,
        upsert: &crate::model::pipeline::upsert::Upsert,
        tables: &PipelineTables,
        partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
        deadline: Instant,
        summary: &mut Summary,
    ) -> Result<Option<i64>> {
        let upsert_tables = self.upsert_tables(pipeline, upsert, tables);
        let calls_before = tables.registry.as_ref().map_or(0, Registry::calls);
        let out = crate::modes::upsert::ingest(&self.catalogs, &self.config, &self.sink, upsert_tables, partitions, deadline).await?;
        summary.registry_calls += tables.registry.as_ref().map_or(0, Registry::calls) - calls_before;
        summary.written += out.apply.rows_added;
        summary.dead_letter += out.dead_letter;
        summary.skipped_replay += out.skipped_replay + out.apply.skipped_replay;
        summary.duplicates += out.duplicates;
        summary.files += out.files;
        summary.commit_attempts += out.commit_attempts;
        summary.commit_ms += out.commit_ms;
        summary.upsert_applied += out.apply.applied;
        summary.upsert_stale += out.apply.stale;
        summary.upsert_truncated += out.apply.rows_truncated;
        summary.key_files_read += out.apply.files_read;
        summary.key_bytes_read += out.apply.bytes_read;
        summary.key_read_requests += out.apply.read_requests;
        summary.changelog_written += out.changelog_written;
        if out.snapshot_id.is_some() {
            summary.snapshot_id = out.snapshot_id;
        }
        Ok(out.oldest_timestamp_ms)
    }

    fn now_us(&self) -> i64 {
        chrono::Utc::now().timestamp_micros()
    }
}

/// `topic-partition:first-last` per partition, comma-separated: the offsets a batch covers.
fn offset_ranges(partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>) -> String {
    let ranges = partitions.iter().filter_map(|(tp, records)| Some(format!("{tp}:{}-{}", records.first()?.offset, records.last()?.offset)));
    ranges.collect::<Vec<_>>().join(",")
}

/// Create the pipeline's tables if missing, and check an existing table can take its rows:
/// the lineage columns are there and the pipeline's schema fits, or evolves the table in a way
/// it allows (then the first commit that needs it evolves it).
async fn open_tables(catalogs: &Catalogs, pipeline: &Pipeline, registry: Option<Registry>) -> Result<PipelineTables> {
    let mut data = catalogs.ensure_table(&pipeline.def).await?;
    if pipeline.upsert.is_some() {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        data = catalogs
            .committer
            .commit_to(data, deadline, &mut crate::modes::upsert::layout::KeyedLayout { key: &pipeline.key })
            .await?
            .table;
    }
    let ident = data.identifier().clone();
    let refuse =
        |what: String| Error::Config(format!("pipeline `{}` cannot write table {ident}: {what}; nothing was written", pipeline.table));
    let metadata = data.metadata();
    let current = metadata.current_schema();
    for name in [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET] {
        if current.field_by_name(name).is_none() {
            return Err(refuse(format!("it has no column {name:?} (icestream keeps Kafka lineage on every row for exactly-once)")));
        }
    }
    // With a registry each record brings its writer schema (checked per record); the pipeline's
    // schema only created the table.
    let writers = [Arc::new(pipeline.source.clone())];
    if pipeline.registry.is_none() {
        let mut last = metadata.last_column_id();
        let evolved = evolve_table(metadata, current, &pipeline.source, &mut last).map_err(refuse)?;
        let target = match evolved {
            // An upsert table evolves now, in a commit of its own: each batch's decoder, guarded
            // apply and changelog read the table's schema as it is when the batch starts.
            Some(_) if pipeline.upsert.is_some() => {
                (**evolve_now(catalogs, data.clone(), &writers, KafkaColumns::default()).await?.metadata().current_schema()).clone()
            }
            Some(evolved) => evolved,
            None => (**current).clone(),
        };
        let target = iceberg::arrow::schema_to_arrow_schema(&target)?;
        let decoded_fields: Vec<_> = target.fields().iter().filter(|f| !is_written_by_icestream(f.name())).cloned().collect();
        RecordDecoder::new(&pipeline.source, Arc::new(ArrowSchema::new(decoded_fields))).map_err(|e| refuse(e.to_string()))?;
    }
    let mut dead_letter = catalogs.ensure_table(&pipeline.dead_letter).await?;
    // Its timestamp columns come at start: the rejects of every batch are built for the schema
    // read here.
    dead_letter = evolve_now(catalogs, dead_letter, &[], pipeline.kafka_columns.for_dead_letters()).await?;
    let dead_letter_schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(dead_letter.metadata().current_schema())?);
    let changelog = match pipeline.changelog() {
        Some(def) => {
            let mut table = catalogs.ensure_table(def).await?;
            if pipeline.registry.is_none() {
                table = evolve_now(catalogs, table, &writers, KafkaColumns::default()).await?;
            }
            Some(table.identifier().clone())
        }
        None => None,
    };
    Ok(PipelineTables {
        data: ident,
        dead_letter: dead_letter.identifier().clone(),
        dead_letter_schema,
        registry,
        changelog,
        reuse: TableReuse::default(),
    })
}

/// Commit the schema `table` needs to take `writers`' rows and have the metadata columns `kafka`
/// (nothing if it has it), and return the table as it is after.
async fn evolve_now(catalogs: &Catalogs, table: Table, writers: &[Arc<SourceSchema>], kafka: KafkaColumns) -> Result<Table> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    Ok(catalogs.committer.commit_to(table, deadline, &mut crate::modes::sink::EvolveSchema { writers, kafka }).await?.table)
}
