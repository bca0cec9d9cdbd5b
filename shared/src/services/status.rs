//! `icestream status`: per pipeline table, how it is doing now, read from table metadata only
//! (no data file is opened): the last commit and its freshness (the figures each append records
//! in its snapshot summary, [`crate::base::freshness`]), rows and files committed in the last hour,
//! small files waiting for compaction, dead letters in the last hour, and commit requests still
//! waiting for the committer (`commit_mode=queued`: their staged manifests under the table).

use iceberg::spec::Operation;
use iceberg::table::Table;
use serde::Serialize;

use crate::base::error::Result;
use crate::base::freshness::Freshness;
use crate::engine::catalog::Catalogs;
use crate::model::config::{CommitMode, Config};
use crate::model::pipeline::PipelineSet;
use crate::services::maintenance::glue_optimizers;

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
    /// The table's format version; on v3 the delete files are deletion vectors.
    pub format_version: u8,
    /// Live delete files (the current snapshot's `total-delete-files`): what a full scan opens
    /// besides the data files, and what compaction folds.
    pub delete_files: u64,
    pub dead_letters_last_hour: u64,
    /// Commit requests staged for the committer and not committed yet; `None` with direct commits.
    pub pending_commit_requests: Option<usize>,
    /// Who runs each maintenance action on the table (`glue_maintenance`, S3 Tables).
    pub maintained_by: std::collections::BTreeMap<&'static str, crate::services::maintenance::glue_optimizers::Runner>,
}

/// The status of every pipeline table of `set`, as of `now_ms`.
pub async fn status(set: &PipelineSet, catalogs: &Catalogs, config: &Config, now_ms: i64) -> Result<Vec<TableStatus>> {
    let mut names: Vec<(String, String)> = set.pipelines.iter().map(|p| (p.table.clone(), p.dead_letter.name.clone())).collect();
    // A pattern's tables per topic: those of the namespace its template names.
    let patterns: Vec<&str> = set.templates.iter().filter(|t| t.topic_pattern.is_some()).map(|t| t.table.as_str()).collect();
    if !patterns.is_empty() {
        let mut listed: Vec<String> =
            catalogs.catalog().list_tables(catalogs.ident("t").namespace()).await?.iter().map(|t| t.name().to_string()).collect();
        listed.sort();
        let found = listed.into_iter().filter(|t| patterns.iter().any(|p| crate::model::pipeline::template::names(p, t)));
        names.extend(found.map(|t| (t.clone(), crate::model::tables::dead_letter_name(&t))));
    }
    let mut out = Vec::with_capacity(names.len());
    for (table, dead_letter_table) in names {
        let data = catalogs.load(&catalogs.ident(&table)).await?;
        let dead_letter = catalogs.load(&catalogs.ident(&dead_letter_table)).await?;
        let mut s = TableStatus { table, ..Default::default() };
        if let Some(current) = data.metadata().current_snapshot() {
            let at = chrono::DateTime::from_timestamp_millis(current.timestamp_ms()).unwrap_or_default();
            s.last_commit = Some(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
            s.last_commit_age_s = Some((now_ms - current.timestamp_ms()).max(0) / 1000);
        }
        s.freshness = latest_freshness(&data);
        s.newest_record_age_ms = s.freshness.map(|f| (now_ms - f.newest_record_ms).max(0));
        (s.rows_last_hour, s.files_last_hour) = appended_since(&data, now_ms - HOUR_MS);
        s.dead_letters_last_hour = appended_since(&dead_letter, now_ms - HOUR_MS).0;
        s.small_files = crate::services::maintenance::compact::small_file_count(&data, config.target_file_size_bytes).await?;
        s.format_version = data.metadata().format_version() as u8;
        let own_orphans = crate::services::maintenance::tombstones::has_tombstones(&data)
            || !crate::engine::confine::gc_enabled(data.metadata())
            || set.pipelines.iter().any(|p| p.table == s.table && p.upsert.is_some());
        s.maintained_by = glue_optimizers::runners(glue_optimizers::Maintainer::of(config), own_orphans);
        s.delete_files = data.metadata().current_snapshot().map_or(0, |c| summary_count(c.summary(), "total-delete-files"));
        if let CommitMode::Queued { .. } = config.commit_mode {
            let settings = crate::services::maintenance::MaintenanceSettings::from(config);
            let staged = format!("{}/{}", data.metadata().location().trim_end_matches('/'), crate::engine::commit::staged::STAGED_DIR);
            s.pending_commit_requests =
                Some(crate::services::maintenance::orphans::list_files(&staged, &settings).await.map(|f| f.len()).unwrap_or(0));
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

/// A count of a snapshot summary (0 when absent).
fn summary_count(summary: &iceberg::spec::Summary, key: &str) -> u64 {
    summary.additional_properties.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Records and data files appended (not rewritten by compaction) since `since_ms`.
fn appended_since(table: &Table, since_ms: i64) -> (u64, u64) {
    table
        .metadata()
        .snapshots()
        .filter(|s| s.timestamp_ms() >= since_ms && s.summary().operation == Operation::Append)
        .fold((0, 0), |(rows, files), s| {
            (rows + summary_count(s.summary(), "added-records"), files + summary_count(s.summary(), "added-data-files"))
        })
}

/// The status as text for people: one line per table.
/// Clauses a figure is missing for are left out (no placeholders); durations read as a person
/// says them (`14 d 3 h`, `2 min 5 s`, `850 ms`).
pub fn text(statuses: &[TableStatus]) -> String {
    let mut out = String::new();
    for s in statuses {
        let mut parts = vec![match (&s.last_commit, s.last_commit_age_s) {
            (Some(at), Some(age)) => format!("last commit {at} ({} ago)", duration(age.saturating_mul(1000))),
            (Some(at), None) => format!("last commit {at}"),
            (None, _) => "no commit yet".to_string(),
        }];
        if let Some(age) = s.newest_record_age_ms {
            parts.push(format!("newest record {} old", duration(age)));
        }
        if let Some(f) = &s.freshness {
            parts.push(format!(
                "record ages at commit p50 {}, p99 {}, max {}; commit took {}",
                duration(f.age_p50_ms),
                duration(f.age_p99_ms),
                duration(f.age_max_ms),
                duration(f.commit_latency_ms)
            ));
        }
        parts
            .push(format!("last hour {} rows in {} files, {} dead letters", s.rows_last_hour, s.files_last_hour, s.dead_letters_last_hour));
        parts.push(format!("{} small files", s.small_files));
        if s.delete_files > 0 {
            let kind = if s.format_version >= 3 { "deletion vectors" } else { "position delete files" };
            parts.push(format!("{} {kind}", s.delete_files));
        }
        if let Some(n) = s.pending_commit_requests {
            parts.push(format!("{n} pending commit requests"));
        }
        let elsewhere: Vec<String> = s
            .maintained_by
            .iter()
            .filter(|(_, r)| **r != glue_optimizers::Runner::Icestream)
            .map(|(a, r)| format!("{a} by {}", r.describe()))
            .collect();
        if !elsewhere.is_empty() {
            parts.push(elsewhere.join(", "));
        }
        out.push_str(&format!("{}: {}\n", s.table, parts.join("; ")));
    }
    out
}

/// `ms` milliseconds in the two largest units that matter.
fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms} ms");
    }
    if ms < 60_000 {
        return format!("{:.1} s", ms as f64 / 1000.0);
    }
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h) {
        (0, 0) => format!("{m} min {s} s"),
        (0, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 46: `52769666.7s` and `-` placeholders were what a user read.
    #[test]
    fn durations_read_as_people_say_them_and_missing_figures_are_left_out() {
        assert_eq!(
            [850, 12_340, 125_000, 11_100_000, 52_769_666_700].map(duration),
            ["850 ms", "12.3 s", "2 min 5 s", "3 h 5 min", "610 d 18 h"]
        );
        let never = TableStatus { table: "orders".into(), ..Default::default() };
        assert_eq!(text(&[never]), "orders: no commit yet; last hour 0 rows in 0 files, 0 dead letters; 0 small files\n");
        let s = TableStatus {
            table: "orders".into(),
            last_commit: Some("2026-12-04T10:00:00.000Z".into()),
            last_commit_age_s: Some(52_769_666),
            newest_record_age_ms: Some(1_500),
            pending_commit_requests: Some(2),
            ..Default::default()
        };
        let line = text(&[s]);
        assert!(
            line.starts_with("orders: last commit 2026-12-04T10:00:00.000Z (610 d 18 h ago); newest record 1.5 s old; last hour"),
            "{line}"
        );
        assert!(line.ends_with("; 2 pending commit requests\n") && !line.contains(" - ") && !line.contains("-;"), "{line}");
    }

    #[test]
    fn delete_files_are_named_by_the_table_format() {
        let of =
            |format_version, delete_files| text(&[TableStatus { table: "t".into(), format_version, delete_files, ..Default::default() }]);
        assert!(of(3, 4).ends_with("; 0 small files; 4 deletion vectors\n"), "{}", of(3, 4));
        assert!(of(2, 4).ends_with("; 0 small files; 4 position delete files\n"), "{}", of(2, 4));
        assert!(of(2, 0).ends_with("; 0 small files\n"));
    }

    #[test]
    fn actions_someone_else_runs_are_named() {
        let by = |maintainer| {
            let maintained_by = glue_optimizers::runners(maintainer, false);
            text(&[TableStatus { table: "t".into(), maintained_by, ..Default::default() }])
        };
        assert!(by(glue_optimizers::Maintainer::Icestream).ends_with("; 0 small files\n"));
        let glue = by(glue_optimizers::Maintainer::GlueOptimizers);
        assert!(
            glue.contains("expire by Glue's `retention` optimizer") && glue.contains("remove-orphans by Glue's `orphan_file_deletion`"),
            "{glue}"
        );
        assert!(!glue.contains("rewrite-manifests by"), "{glue}");
    }
}
