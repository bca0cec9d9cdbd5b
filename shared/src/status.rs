//! `icestream status`: per pipeline table, how it is doing now, read from table metadata only
//! (no data file is opened): the last commit and its freshness (the figures each append records
//! in its snapshot summary, [`crate::freshness`]), rows and files committed in the last hour,
//! small files waiting for compaction, dead letters in the last hour, and commit requests still
//! waiting for the committer (`commit_mode=queued`: their staged manifests under the table).

use iceberg::spec::Operation;
use iceberg::table::Table;
use serde::Serialize;

use crate::catalog::Catalogs;
use crate::config::{CommitMode, Config};
use crate::error::Result;
use crate::freshness::Freshness;
use crate::pipeline::PipelineSet;

const HOUR_MS: i64 = 3_600_000;

/// One pipeline table's status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableStatus {
    pub table: String,
    /// The current snapshot's time (RFC 3339), and how long ago it was, seconds.
    pub last_commit: Option<String>,
    pub last_commit_age_s: Option<i64>,
    /// The records' ages when the last append with figures landed.
    pub freshness: Option<Freshness>,
    /// Age of the newest record the table holds, now (ms): how far behind the table is.
    pub newest_record_age_ms: Option<i64>,
    pub rows_last_hour: u64,
    pub files_last_hour: u64,
    /// Live data files below the compaction threshold (75% of `target_file_size_bytes`).
    pub small_files: usize,
    pub dead_letters_last_hour: u64,
    /// Commit requests staged for the committer and not committed yet; `None` with direct commits.
    pub pending_commit_requests: Option<usize>,
}

/// The status of every pipeline table of `set`, as of `now_ms`.
pub async fn status(set: &PipelineSet, catalogs: &Catalogs, config: &Config, now_ms: i64) -> Result<Vec<TableStatus>> {
    let mut out = Vec::with_capacity(set.pipelines.len());
    for pipeline in &set.pipelines {
        let catalog = catalogs.catalog();
        let data = catalog.load_table(&catalogs.ident(&pipeline.table)).await?;
        let dead_letter = catalog.load_table(&catalogs.ident(&pipeline.dead_letter.name)).await?;
        let mut s = TableStatus { table: pipeline.table.clone(), ..Default::default() };
        if let Some(current) = data.metadata().current_snapshot() {
            let at = chrono::DateTime::from_timestamp_millis(current.timestamp_ms()).unwrap_or_default();
            s.last_commit = Some(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
            s.last_commit_age_s = Some((now_ms - current.timestamp_ms()).max(0) / 1000);
        }
        s.freshness = latest_freshness(&data);
        s.newest_record_age_ms = s.freshness.map(|f| (now_ms - f.newest_record_ms).max(0));
        (s.rows_last_hour, s.files_last_hour) = appended_since(&data, now_ms - HOUR_MS);
        s.dead_letters_last_hour = appended_since(&dead_letter, now_ms - HOUR_MS).0;
        s.small_files = crate::maintenance::compact::small_file_count(&data, config.target_file_size_bytes).await?;
        if let CommitMode::Queued { .. } = config.commit_mode {
            let settings = crate::maintenance::MaintenanceSettings::from(config);
            let staged = format!("{}/{}", data.metadata().location().trim_end_matches('/'), crate::commit::staged::STAGED_DIR);
            s.pending_commit_requests = Some(crate::maintenance::orphans::list_files(&staged, &settings).await.map(|f| f.len()).unwrap_or(0));
        }
        out.push(s);
    }
    Ok(out)
}

/// The freshness figures of the newest snapshot that has them (compactions and expiries have none).
fn latest_freshness(table: &Table) -> Option<Freshness> {
    let mut snapshots: Vec<_> = table.metadata().snapshots().collect();
    snapshots.sort_by_key(|s| std::cmp::Reverse(s.timestamp_ms()));
    snapshots.iter().find_map(|s| Freshness::from_summary(&s.summary().additional_properties))
}

/// Records and data files appended (not rewritten by compaction) since `since_ms`.
fn appended_since(table: &Table, since_ms: i64) -> (u64, u64) {
    let get = |props: &std::collections::HashMap<String, String>, key: &str| props.get(key).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    table
        .metadata()
        .snapshots()
        .filter(|s| s.timestamp_ms() >= since_ms && s.summary().operation == Operation::Append)
        .fold((0, 0), |(rows, files), s| {
            let props = &s.summary().additional_properties;
            (rows + get(props, "added-records"), files + get(props, "added-data-files"))
        })
}

/// The status as text for people: one line per table.
pub fn text(statuses: &[TableStatus]) -> String {
    let ms = |v: Option<i64>| v.map_or("-".to_string(), |v| format!("{:.1}s", v as f64 / 1000.0));
    let mut out = String::new();
    for s in statuses {
        out.push_str(&format!(
            "{}: last commit {} ({} s ago); newest record {} old; at commit p50 {} p99 {} max {}, commit {}; last hour {} rows in {} files, {} dead letters; {} small files; {} pending commit requests\n",
            s.table,
            s.last_commit.as_deref().unwrap_or("never"),
            s.last_commit_age_s.map_or("-".into(), |a| a.to_string()),
            ms(s.newest_record_age_ms),
            ms(s.freshness.map(|f| f.age_p50_ms)),
            ms(s.freshness.map(|f| f.age_p99_ms)),
            ms(s.freshness.map(|f| f.age_max_ms)),
            ms(s.freshness.map(|f| f.commit_latency_ms)),
            s.rows_last_hour,
            s.files_last_hour,
            s.dead_letters_last_hour,
            s.small_files,
            s.pending_commit_requests.map_or("-".into(), |n| n.to_string()),
        ));
    }
    out
}
