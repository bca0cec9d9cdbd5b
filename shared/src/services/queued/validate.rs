//! What the committer accepts (issue 52). A commit request is only a message: anyone who may
//! send to the queue could name any table, manifest or offsets. The committer takes a request
//! only when
//! * its table is one its configuration writes ([`configured_tables`]: the pipeline file's or
//!   the `table` knob's tables with their dead-letter tables);
//! * it names a manifest at exactly `<table location>/staged/<uuid>.avro` whose UUID is the
//!   digest of the request's claims and of the files the manifest lists
//!   ([`CommitRequest::manifest_uuid`]). Only a writer, which may write the staged directory,
//!   can make such a manifest; a request replayed with other ranges or counts, or naming
//!   someone else's manifest, does not match it. A writer with no row left stages an empty
//!   manifest: every range is backed by one;
//! * its counts are the manifest's, every file it lists is a data file under the table's own
//!   data directory ([`crate::engine::confine::data_dir`]);
//! * every row of those files lies in the request's ranges, by the lineage columns the files
//!   hold (`kafka_topic`, `kafka_partition`, `kafka_offset`).
//!
//! The ranges may cover offsets no row holds (dead letters, duplicates dropped, replays
//! skipped, the batch's last record among them): no check on the files could tell a real such
//! offset from a made-up one, which is why the ranges are bound to the manifest's name instead.
//! A refused request is a failure with its reason: never committed, no watermark moved, and
//! nothing it names deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::Array;
use futures::{StreamExt, TryStreamExt};
use iceberg::arrow::ArrowFileReader;
use iceberg::io::FileMetadata;
use iceberg::spec::{DataContentType, DataFile};
use iceberg::table::Table;
use parquet::arrow::ParquetRecordBatchStreamBuilder;

use crate::base::error::{Error, Result};
use crate::engine::columns::Columns;
use crate::engine::commit::staged::{read_staged_manifest, staged_manifest_name};
use crate::engine::confine;
use crate::engine::queue::CommitRequest;
use crate::model::config::Config;
use crate::model::event::TopicPartition;
use crate::model::tables::lineage;

/// Staged files whose lineage is read at once.
const CONCURRENT_LINEAGE_READS: usize = 8;

/// The checks of one committer run on its requests (built per batch, cheap).
pub struct Admission {
    config: Config,
}

impl Admission {
    pub fn new(config: &Config) -> Self {
        Self { config: config.clone() }
    }

    /// The data files `request` adds to `table`, or why it is refused (the error says which
    /// rule it breaks).
    pub async fn staged_files(&self, table: &Table, request: &CommitRequest) -> Result<Vec<DataFile>> {
        let refused = |why: String| Error::Event(format!("commit request for {}.{} refused: {why}", request.namespace, request.table));
        self.configured(request).await.map_err(refused)?;
        let (path, files) = bound_manifest(table, request).await.map_err(|e| match e {
            Refusal::Rule(why) => refused(why),
            Refusal::Read(e) => e,
        })?;
        let count: u64 = files.iter().map(DataFile::record_count).sum();
        let bytes: u64 = files.iter().map(DataFile::file_size_in_bytes).sum();
        if (files.len() as u64, count, bytes) != (request.files, request.records, request.bytes) {
            return Err(refused(format!(
                "{path} lists {} files, {count} rows, {bytes} bytes; the request claims {}, {}, {}",
                files.len(),
                request.files,
                request.records,
                request.bytes
            )));
        }
        let data_dir = confine::data_dir(table.metadata()).map_err(refused)?;
        if let Some(file) = files.iter().find(|f| f.content_type() != DataContentType::Data || !confine::within(&data_dir, f.file_path())) {
            return Err(refused(format!(
                "{path} lists {}, which is not a data file under the table's data directory {data_dir}",
                file.file_path()
            )));
        }
        let ranges = request.ranges_by_partition();
        // The futures made first: a lazily mapped stream would not be `Send` for every lifetime.
        let reads: Vec<_> = files.iter().map(|f| row_outside(table, f, &ranges)).collect();
        let outside: Vec<Option<String>> = futures::stream::iter(reads).buffered(CONCURRENT_LINEAGE_READS).try_collect().await?;
        if let Some(why) = outside.into_iter().flatten().next() {
            return Err(refused(why));
        }
        Ok(files)
    }

    /// The staged manifest of a request dropped as a replay, if it may be removed: only one
    /// bound to the request ([`CommitRequest::manifest_uuid`]) of a configured table. Anything
    /// else (forged, already gone, unreadable) is left alone, and orphan removal's to judge.
    pub async fn consumed_manifest<'a>(&self, table: &Table, request: &'a CommitRequest) -> Option<&'a str> {
        if self.configured(request).await.is_err() {
            return None;
        }
        match bound_manifest(table, request).await {
            Ok(_) => request.manifest.as_deref(),
            Err(Refusal::Rule(why)) => {
                tracing::warn!(table = %request.table, reason = %why, "dropped request's manifest left alone");
                None
            }
            Err(Refusal::Read(e)) => {
                tracing::debug!(table = %request.table, error = %e, "dropped request's manifest not read; left alone");
                None
            }
        }
    }

    async fn configured(&self, request: &CommitRequest) -> std::result::Result<(), String> {
        let tables = configured_tables(&self.config).await.map_err(|e| format!("the committer's tables are unknown: {e}"))?;
        let name = format!("{}.{}", request.namespace, request.table);
        if is_configured(&tables, &request.namespace, &request.table) {
            return Ok(());
        }
        let known: Vec<&str> = tables.iter().map(String::as_str).collect();
        Err(format!("{name} is not a table this committer's configuration writes ({})", known.join(", ")))
    }
}

/// Why a manifest does not back a request: a rule broken, or it could not be read (gone, or
/// storage failing: the error as it is).
enum Refusal {
    Rule(String),
    Read(Error),
}

/// The request's manifest path and the files it lists, if the path is the table's own
/// `staged/<uuid>.avro` and the UUID binds the request and those files.
async fn bound_manifest(table: &Table, request: &CommitRequest) -> std::result::Result<(String, Vec<DataFile>), Refusal> {
    let path = request.manifest.clone().ok_or_else(|| Refusal::Rule("no staged manifest named".into()))?;
    let name = staged_manifest_name(table.metadata(), &path).map_err(Refusal::Rule)?;
    let files = read_staged_manifest(table, &path).await.map_err(Refusal::Read)?;
    if request.manifest_uuid(files.iter().map(DataFile::file_path)) != name {
        return Err(Refusal::Rule(format!(
            "{path} was not staged for this request: its name is not the digest of the request's table, ranges and counts and of the files it lists (a replayed or forged request)"
        )));
    }
    Ok((path, files))
}

/// The first row of `file` outside `ranges`, described; `None` when every row is inside.
async fn row_outside(table: &Table, file: &DataFile, ranges: &BTreeMap<TopicPartition, (i64, i64)>) -> Result<Option<String>> {
    let path = file.file_path();
    let storage = |e: iceberg::Error| Error::Storage { path: path.to_string(), source: e };
    let input = table.file_io().new_input(path)?;
    let reader = ArrowFileReader::new(FileMetadata { size: file.file_size_in_bytes() }, Box::new(input.reader().await.map_err(storage)?));
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
    let columns = [lineage::TOPIC, lineage::PARTITION, lineage::OFFSET];
    let mask = crate::engine::commit::live_rows::projection(table, builder.parquet_schema(), path, &columns)?;
    let mut stream = builder.with_projection(mask).build()?;
    let mut rows = 0u64;
    while let Some(batch) = stream.try_next().await? {
        let found = Columns::new(&batch, path).with_schema(table.metadata().current_schema());
        let (topics, partitions, offsets) = (found.strings(lineage::TOPIC)?, found.i32(lineage::PARTITION)?, found.i64(lineage::OFFSET)?);
        for i in 0..batch.num_rows() {
            if topics.is_null(i) || partitions.is_null(i) || offsets.is_null(i) {
                return Ok(Some(format!("{path} has a row without lineage (row {})", rows + i as u64)));
            }
            let tp = TopicPartition { topic: topics.value(i).to_string(), partition: partitions.value(i) };
            let offset = offsets.value(i);
            match ranges.get(&tp) {
                Some((first, last)) if (*first..=*last).contains(&offset) => {}
                Some((first, last)) => {
                    return Ok(Some(format!("{path} holds offset {offset} of {tp}, outside the request's range {first}..={last}")));
                }
                None => return Ok(Some(format!("{path} holds offset {offset} of {tp}, a topic-partition the request has no range for"))),
            }
        }
        rows += batch.num_rows() as u64;
    }
    if rows != file.record_count() {
        return Ok(Some(format!("{path} holds {rows} rows, its manifest entry says {}", file.record_count())));
    }
    Ok(None)
}

/// Every table the configuration writes through the queue, as `namespace.table`: the pipelines'
/// tables (or the `table` knob's) with their dead-letter tables. Read once per process and configuration (the pipeline file as ingest
/// reads it, once per cold start).
pub async fn configured_tables(config: &Config) -> Result<Arc<BTreeSet<String>>> {
    type Known = Mutex<HashMap<String, Arc<BTreeSet<String>>>>;
    static KNOWN: OnceLock<Known> = OnceLock::new();
    let key = format!("{:?}\n{}\n{}", config.pipelines, config.namespace, config.table);
    let known = KNOWN.get_or_init(Known::default);
    if let Some(tables) = known.lock().map_err(|_| Error::Invariant("configured tables lock".into()))?.get(&key) {
        return Ok(tables.clone());
    }
    let (namespace, names, templates) = crate::model::pipeline::PipelineSet::table_names(config).await?;
    // A table per topic of a pattern: its template stands for the tables it names.
    let tables: BTreeSet<String> = names.into_iter().chain(templates).map(|t| format!("{namespace}.{t}")).collect();
    let tables = Arc::new(tables);
    known.lock().map_err(|_| Error::Invariant("configured tables lock".into()))?.insert(key, tables.clone());
    Ok(tables)
}

/// Whether `namespace.table` is one of `tables` ([`configured_tables`]), or a table (or its
/// dead-letter table) a table-per-topic template among them names.
fn is_configured(tables: &BTreeSet<String>, namespace: &str, table: &str) -> bool {
    use crate::model::pipeline::template;
    let of_template = |t: &String| {
        t.rsplit_once('.').is_some_and(|(ns, name)| ns == namespace && template::is_template(name) && template::covers(name, table))
    };
    tables.contains(&format!("{namespace}.{table}")) || tables.iter().any(of_template)
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
