//! Dead letters of an upsert pipeline, replayed through its guarded apply as ingest applies a
//! batch: decoded by the pipeline's envelope, appended once to the changelog (marked there, as
//! the table marks them), then applied by rank ([`KeyedApply::replay`]). A dead letter of a key
//! whose live version or delete ranks above it is stale and changes nothing; one of a new key
//! inserts it. Every replayed change is marked in the table, applied or stale, so a second
//! replay adds nothing; watermarks stay as they are.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::{ReplayAppend, ReplayReport, count_still_failing};
use crate::base::error::Result;
use crate::engine::keyed::apply::{KeyedApply, KeyedChanges, Truncate};
use crate::model::event::{KafkaRecordIn, TopicPartition};
use crate::modes::dead_letter::DeadLetterBuilder;
use crate::modes::upsert::{Loaded, UpsertTables, changelog_rows, decoder_for, load_tables};
use crate::services::ingest::IngestPipeline;

/// Replay `partitions` (dead letters not marked yet, at or below the watermarks) into an upsert
/// pipeline's tables.
pub(super) async fn replay(
    pipeline: &IngestPipeline,
    tables: &UpsertTables<'_>,
    partitions: &BTreeMap<TopicPartition, Vec<KafkaRecordIn>>,
    mut report: ReplayReport,
    dry_run: bool,
    deadline: Instant,
) -> Result<ReplayReport> {
    let (catalogs, config) = (pipeline.catalogs(), pipeline.config());
    let Loaded { data, changelog, writers } = load_tables(catalogs, tables, partitions, !dry_run, deadline).await?;
    let mut decoder = decoder_for(tables, &data, writers)?;
    // The marks decide what is held, per table, at each commit attempt.
    decoder.decode(partitions, |_, _| false);
    let (rows, deletes, ops, truncates) = decoder.finish()?;
    let rejects = std::mem::replace(&mut decoder.rejects, DeadLetterBuilder::new(0, "")).finish(tables.dead_letter_schema.clone())?;
    count_still_failing(&rejects, &mut report.still_failing);
    let changes = rows.num_rows() + deletes.num_rows() + truncates.len();
    report.replayed = changes;
    if dry_run || changes == 0 {
        return Ok(report);
    }
    let newest_truncate = truncates.iter().map(Truncate::rank).max();
    // The changelog first, as ingest does: a crash in between leaves the table's marks unset,
    // and the next replay applies what the changelog's marks already hold.
    if let Some(table) = changelog {
        let schema = Arc::new(iceberg::arrow::schema_to_arrow_schema(table.metadata().current_schema())?);
        let mut planner = ReplayAppend::new(changelog_rows(schema, &rows, &ops, &deletes)?, vec![], config);
        planner.truncate = newest_truncate;
        report.commit_attempts += catalogs.committer.commit_to(table, deadline, &mut planner).await?.attempts;
    }
    let changes_in = KeyedChanges { rows, deletes, truncates };
    let order = tables.upsert.order_column();
    let mut planner =
        KeyedApply::new(changes_in, &tables.pipeline.key, order, &BTreeMap::new(), &config.compression, config.target_file_size_bytes)?
            .with_key_index(tables.key_index.clone())
            .replay();
    let outcome = catalogs.committer.commit_to(data, deadline, &mut planner).await?;
    (report.replayed, report.stale) = match outcome.committed {
        true => (changes - planner.stats.skipped_replay, planner.stats.stale),
        false => (0, 0),
    };
    report.snapshot_id = outcome.snapshot_id;
    report.commit_attempts += outcome.attempts;
    tracing::info!(table = %report.table, replayed = report.replayed, stale = report.stale, "dead letters replayed through the guarded apply");
    Ok(report)
}
