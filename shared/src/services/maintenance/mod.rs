//! Scheduled table maintenance (docs/maintenance.md): compaction, manifest rewrite, snapshot
//! expiry and orphan removal, shared by the `maintenance` Lambda function and
//! `icestream maintain`. Every change goes through the one commit module; every action only
//! looks at the table as it is now, so running it again after a timeout is safe.

pub mod compact;
pub mod expire;
pub mod glue_optimizers;
pub mod managed;
pub mod orphans;
pub mod rewrite_manifests;
pub mod tombstones;
pub mod upgrade;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataContentType, ManifestFile, SnapshotRef};
use iceberg::table::Table;
use serde::{Deserialize, Serialize};

use crate::base::error::{Error, Result};
use crate::engine::catalog::Catalogs;
use crate::model::config::Config;
use crate::services::audit::AuditTarget;
use crate::services::report::TableReport;

/// One maintenance action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    PurgeTombstones,
    Compact,
    /// Only when asked for (`format_version=3`); after compaction when both are, which folds
    /// the position deletes an upgrade refuses.
    Upgrade,
    RewriteManifests,
    Expire,
    RemoveOrphans,
    /// Only when asked for: decoding again what failed is an operator's decision.
    ReplayDeadLetters,
    /// Only when asked for; after a replay when both are.
    Audit,
    Report,
}

impl Action {
    /// The order `all` runs in: tombstones first (a properties-only commit, upsert tables only),
    /// compaction (it makes the most garbage), manifests next (so expiry sees the compact
    /// manifests), expiry, then orphans (what expiry left behind).
    pub const SAFE_ORDER: [Action; 5] =
        [Action::PurgeTombstones, Action::Compact, Action::RewriteManifests, Action::Expire, Action::RemoveOrphans];

    pub const NAMES: &'static [&'static str] = &[
        "purge-tombstones",
        "compact",
        "upgrade",
        "rewrite-manifests",
        "expire",
        "remove-orphans",
        "replay-dead-letters",
        "audit",
        "report",
    ];

    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name.trim() {
            "purge-tombstones" => Action::PurgeTombstones,
            "compact" => Action::Compact,
            "upgrade" => Action::Upgrade,
            "rewrite-manifests" => Action::RewriteManifests,
            "expire" => Action::Expire,
            "remove-orphans" => Action::RemoveOrphans,
            "replay-dead-letters" => Action::ReplayDeadLetters,
            "audit" => Action::Audit,
            "report" => Action::Report,
            other => {
                return Err(Error::Config(format!("unknown maintenance action {other:?}: allowed are {}", Self::NAMES.join(", "))));
            }
        })
    }
}

/// The knobs maintenance reads, taken from [`Config`].
#[derive(Debug, Clone)]
pub struct MaintenanceSettings {
    pub hot_partition_hours: i64,
    pub snapshot_max_age_hours: i64,
    pub min_snapshots_to_keep: usize,
    pub orphan_margin_hours: i64,
    pub target_file_size_bytes: usize,
    pub compression: String,
    pub s3_path_style: Option<bool>,
    pub tombstone_retention_days: i64,
    /// S3 Tables: the table bucket, if the managed maintenance settings are to be written.
    pub s3tables_set_in_bucket: Option<String>,
    /// Compaction rewrites only data files with deletes to fold in (Glue's optimizer packs the rest).
    pub compact_deletes_only: bool,
    /// "Now" for hot partitions, retention and the orphan margin.
    pub clock: crate::base::clock::Clock,
    /// The whole configuration: `replay-dead-letters` builds the ingest pipeline from it.
    pub config: Config,
}

impl From<&Config> for MaintenanceSettings {
    fn from(c: &Config) -> Self {
        Self {
            hot_partition_hours: c.hot_partition_hours,
            snapshot_max_age_hours: c.snapshot_max_age_hours,
            min_snapshots_to_keep: c.min_snapshots_to_keep,
            orphan_margin_hours: c.orphan_margin_hours,
            target_file_size_bytes: c.target_file_size_bytes,
            compression: c.compression.clone(),
            s3_path_style: c.s3_path_style,
            tombstone_retention_days: c.tombstone_retention_days,
            s3tables_set_in_bucket: (c.catalog == crate::model::config::CatalogKind::S3Tables && c.s3tables_maintenance_set)
                .then(|| c.warehouse.clone()),
            compact_deletes_only: false,
            clock: crate::base::clock::Clock::System,
            config: c.clone(),
        }
    }
}

/// What to do, to which tables.
#[derive(Debug, Clone)]
pub struct MaintenanceRequest {
    /// In run order; `Report` alone means every action as a dry run.
    pub actions: Vec<Action>,
    /// Empty = every table of the namespace (see [`MaintenanceRequest::or_tables`]).
    pub tables: Vec<String>,
    pub dry_run: bool,
    /// Which dead letters `replay-dead-letters` takes.
    pub replay: crate::services::replay::ReplayFilter,
    pub settings: MaintenanceSettings,
}

/// The tables maintenance looks after when a request names none, from the pipeline file
/// (each pipeline table and its dead-letter table; the file's namespace replaces the knob's),
/// or `None` without a file: then every table of the namespace.
pub async fn pipeline_tables(config: &mut Config) -> Result<Option<Vec<String>>> {
    if config.pipelines.is_none() {
        return Ok(None);
    }
    // Names only: maintenance never needs the schemas (nor a schema registry).
    let (namespace, mut tables, templates) = crate::model::pipeline::PipelineSet::table_names(config).await?;
    config.namespace = namespace;
    if !templates.is_empty() {
        // A pattern's tables per topic: those of the namespace its template names.
        let catalogs = crate::engine::catalog::Catalogs::connect(config).await?;
        let listed = catalogs.catalog().list_tables(catalogs.ident("t").namespace()).await?;
        let found = listed
            .iter()
            .map(|t| t.name().to_string())
            .filter(|t| templates.iter().any(|template| crate::model::pipeline::template::covers(template, t)));
        let found: Vec<String> = found.filter(|t| !tables.contains(t)).collect();
        tables.extend(found);
    }
    Ok(Some(tables))
}

impl MaintenanceRequest {
    /// Fill an empty table list with `tables` (see [`pipeline_tables`]).
    pub fn or_tables(mut self, tables: Option<&Vec<String>>) -> Self {
        if self.tables.is_empty()
            && let Some(tables) = tables
        {
            self.tables = tables.clone();
        }
        self
    }
}

/// One name or several, as the schedule's JSON input may give them.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect(),
            OneOrMany::Many(v) => v,
        }
    }
}

/// The EventBridge Scheduler input: `{"action": "compact", "table": "vehicle_telemetry",
/// "dry_run": false}`; `action` and `table` may be lists or comma-separated, and may be absent;
/// `since` and `reason` select the dead letters of `replay-dead-letters`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleInput {
    action: Option<OneOrMany>,
    table: Option<OneOrMany>,
    dry_run: Option<bool>,
    since: Option<String>,
    reason: Option<String>,
}

impl MaintenanceRequest {
    /// From action and table names (none = all) and the configuration.
    pub fn new(actions: &[String], tables: &[String], dry_run: bool, config: &Config) -> Result<Self> {
        let parsed: BTreeSet<Action> = actions.iter().map(|a| Action::parse(a)).collect::<Result<_>>()?;
        let (actions, dry_run) = if parsed.is_empty() {
            (Action::SAFE_ORDER.to_vec(), dry_run)
        } else if parsed.contains(&Action::Report) {
            // A report is every action, planned but not done.
            (Action::SAFE_ORDER.to_vec(), true)
        } else {
            // BTreeSet order is the safe order (the enum is declared in it).
            (parsed.into_iter().collect(), dry_run)
        };
        Ok(Self { actions, tables: tables.to_vec(), dry_run, replay: Default::default(), settings: MaintenanceSettings::from(config) })
    }

    /// Which dead letters `replay-dead-letters` takes (see [`crate::services::replay::ReplayFilter::parse`]).
    pub fn with_replay_filter(mut self, since: &str, reason: &str) -> Result<Self> {
        self.replay = crate::services::replay::ReplayFilter::parse(since, reason, self.settings.clock.now_us())?;
        Ok(self)
    }

    /// From a schedule's JSON input; an EventBridge rule event's `detail` is accepted too.
    pub fn from_event(payload: serde_json::Value, config: &Config) -> Result<Self> {
        let input = match payload {
            serde_json::Value::Null => serde_json::json!({}),
            serde_json::Value::Object(mut map) if map.get("detail").is_some_and(|d| d.is_object()) => {
                map.remove("detail").unwrap_or_default()
            }
            other => other,
        };
        let input: ScheduleInput =
            serde_json::from_value(input).map_err(|e| Error::Event(format!("maintenance input {{action, table, dry_run}}: {e}")))?;
        Self::new(
            &input.action.map(OneOrMany::into_vec).unwrap_or_default(),
            &input.table.map(OneOrMany::into_vec).unwrap_or_default(),
            input.dry_run.unwrap_or(false),
            config,
        )?
        .with_replay_filter(input.since.as_deref().unwrap_or_default(), input.reason.as_deref().unwrap_or_default())
    }
}

/// What maintenance did (or, in a dry run, would do) to each table.
#[derive(Debug, Clone, Serialize)]
pub struct MaintenanceReport {
    pub dry_run: bool,
    pub actions: Vec<Action>,
    pub tables: Vec<TableMaintenance>,
    /// Manifests and manifest lists read from storage in this run, and reads saved by
    /// reading each once ([`crate::engine::commit::manifest_cache`]).
    pub manifest_reads: crate::engine::commit::manifest_cache::ManifestReads,
    pub duration_ms: u64,
}

impl MaintenanceReport {
    /// Tables whose maintenance failed, with the error.
    pub fn failures(&self) -> Vec<(&str, &str)> {
        self.tables.iter().filter_map(|t| t.error.as_deref().map(|e| (t.table.as_str(), e))).collect()
    }
}

/// One table's maintenance.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableMaintenance {
    pub table: String,
    /// The table before maintenance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<TableReport>,
    /// Live data files below 75% of the target size, before maintenance.
    pub small_files: usize,
    /// S3 Tables: the maintenance AWS runs; the actions it covers are skipped here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_by_aws: Option<serde_json::Value>,
    /// `glue_maintenance=glue`: the table's Glue optimizers, as this run left them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub glue_optimizers: Option<glue_optimizers::GlueOptimizersReport>,
    /// Actions not run, and why.
    pub skipped: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purge_tombstones: Option<tombstones::PurgeReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compact: Option<compact::CompactReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<upgrade::UpgradeReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_manifests: Option<rewrite_manifests::RewriteManifestsReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire: Option<expire::ExpireReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove_orphans: Option<orphans::OrphanReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_dead_letters: Option<crate::services::replay::ReplayReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::services::audit::AuditReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Run `request` on its tables, stopping cleanly by `deadline`. A table whose maintenance fails
/// is reported with its error and the others still run.
pub async fn maintain(catalogs: &Catalogs, request: &MaintenanceRequest, deadline: Instant) -> Result<MaintenanceReport> {
    let (report, reads) = crate::engine::commit::manifest_cache::scope(maintain_tables(catalogs, request, deadline)).await;
    Ok(MaintenanceReport { manifest_reads: reads, ..report? })
}

async fn maintain_tables(catalogs: &Catalogs, request: &MaintenanceRequest, deadline: Instant) -> Result<MaintenanceReport> {
    let started = Instant::now();
    let tables = if request.tables.is_empty() {
        let mut names: Vec<String> =
            catalogs.catalog().list_tables(&catalogs.namespace).await?.into_iter().map(|t| t.name().to_string()).collect();
        names.sort();
        names
    } else {
        request.tables.clone()
    };
    // Replays decode with the ingest pipeline, built once per run and only when asked for.
    let ingest = if request.actions.contains(&Action::ReplayDeadLetters) {
        Some(crate::services::ingest::IngestPipeline::new(request.settings.config.clone()).await?)
    } else {
        None
    };
    let mut report = MaintenanceReport {
        dry_run: request.dry_run,
        actions: request.actions.clone(),
        tables: vec![],
        manifest_reads: Default::default(),
        duration_ms: 0,
    };
    for name in tables {
        let mut out = TableMaintenance { table: name.clone(), ..Default::default() };
        if let Err(e) = maintain_table(catalogs, request, ingest.as_ref(), &name, deadline, &mut out).await {
            tracing::error!(table = %name, error = %e, "maintenance failed");
            out.error = Some(e.to_string());
        }
        report.tables.push(out);
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

async fn maintain_table(
    catalogs: &Catalogs,
    request: &MaintenanceRequest,
    ingest: Option<&crate::services::ingest::IngestPipeline>,
    name: &str,
    deadline: Instant,
    out: &mut TableMaintenance,
) -> Result<()> {
    let ident = catalogs.ident(name);
    let table = match catalogs.catalog().load_table(&ident).await {
        Ok(table) => table,
        // Before the first ingest its writer has not created the table: nothing to maintain yet,
        // and no failure (the schedule's alarms would fire every run until then).
        Err(e) => match catalogs.catalog().table_exists(&ident).await {
            Ok(false) => {
                out.skipped.push("all actions: the table does not exist yet (its writer creates it on first ingest)".into());
                return Ok(());
            }
            _ => return Err(e.into()),
        },
    };
    out.before = Some(crate::services::report::report(&table).await?);
    out.small_files = compact::small_file_count(&table, request.settings.target_file_size_bytes).await?;
    let dry_run = request.dry_run;
    if let Some(bucket) = &request.settings.s3tables_set_in_bucket
        && !dry_run
    {
        managed::set_table_maintenance(bucket, &catalogs.namespace.join("."), name, &request.settings).await?;
    }
    out.managed_by_aws = catalogs.managed_maintenance(name).await?;
    let (by, upsert) = glue_optimizers::set_up(catalogs, request, &table, &ident, out).await?;
    let mut errors = Vec::new();
    for action in &request.actions {
        let runs = glue_optimizers::runner(by, *action, upsert);
        if runs.skips() {
            out.skipped.push(format!("{}: run by {}", action_name(*action), runs.describe()));
            continue;
        }
        let request = glue_optimizers::request_for(runs, request, out);
        let request = request.as_ref();
        // Compaction checks the budget itself and reports the groups it leaves.
        if Instant::now() >= deadline && *action != Action::Compact {
            out.skipped.push(format!("{}: no time left in this invocation", action_name(*action)));
            continue;
        }
        // Each action looks at the table as it is now and needs nothing of the ones before: one
        // that fails (a file it cannot read) is reported and the others still run, so expiry
        // and orphan removal never stop behind, say, a compaction that keeps failing.
        if let Err(e) = run_action(catalogs, request, ingest, name, deadline, *action, out).await {
            tracing::error!(table = %name, action = action_name(*action), error = %e, "maintenance action failed");
            errors.push(format!("{}: {e}", action_name(*action)));
        }
    }
    // A failed audit's verdict (set by the action, which itself succeeded) is reported with them.
    errors.extend(out.error.take());
    out.error = (!errors.is_empty()).then(|| errors.join("; "));
    Ok(())
}

/// Run one action on table `name`, its report in `out`.
async fn run_action(
    catalogs: &Catalogs,
    request: &MaintenanceRequest,
    ingest: Option<&crate::services::ingest::IngestPipeline>,
    name: &str,
    deadline: Instant,
    action: Action,
    out: &mut TableMaintenance,
) -> Result<()> {
    let ident = catalogs.ident(name);
    let dry_run = request.dry_run;
    match action {
        Action::PurgeTombstones => {
            // Tombstones are icestream's own: S3 Tables' maintenance knows nothing of them.
            if tombstones::has_tombstones(&catalogs.catalog().load_table(&ident).await?) {
                out.purge_tombstones = Some(tombstones::purge_tombstones(catalogs, &ident, &request.settings, dry_run, deadline).await?);
            }
        }
        Action::Compact => {
            out.compact = Some(compact::compact(catalogs, &ident, &request.settings, dry_run, deadline).await?);
        }
        Action::Upgrade => {
            let to = request.settings.config.format_version;
            out.upgrade = Some(upgrade::upgrade(catalogs, &ident, to, dry_run, deadline).await?);
        }
        Action::RewriteManifests => {
            out.rewrite_manifests = Some(rewrite_manifests::rewrite_manifests(catalogs, &ident, dry_run, deadline).await?);
        }
        Action::Expire => {
            out.expire = Some(expire::expire(catalogs, &ident, &request.settings, dry_run, deadline).await?);
        }
        Action::RemoveOrphans => {
            out.remove_orphans = Some(orphans::remove_orphans(catalogs, &ident, &request.settings, dry_run, deadline).await?);
        }
        Action::ReplayDeadLetters => match ingest.filter(|i| {
            let of_pattern = i
                .pipelines()
                .templates
                .iter()
                .any(|t| t.topic_pattern.is_some() && crate::model::pipeline::template::names(&t.table, name));
            of_pattern || i.pipelines().pipelines.iter().any(|p| p.table == name)
        }) {
            Some(ingest) => {
                out.replay_dead_letters = Some(crate::services::replay::replay(ingest, name, &request.replay, dry_run, deadline).await?)
            }
            None => out.skipped.push("replay-dead-letters: no pipeline writes this table".into()),
        },
        Action::Audit => {
            let pipelines = match &request.settings.config.pipelines {
                Some(_) => crate::model::pipeline::PipelineSet::pipeline_tables(&request.settings.config).await?.1,
                None => vec![],
            };
            // A changelog is audited with its upsert table (the audit of that table reads it).
            if let Some(upsert) = pipelines.iter().find(|p| p.upsert && p.changelog.as_deref() == Some(name)) {
                out.skipped.push(format!("audit: {name} is audited with its upsert table {}", upsert.table));
                return Ok(());
            }
            let target = match AuditTarget::of(&pipelines, name) {
                Ok(target) => target,
                Err(e) => {
                    out.skipped.push(format!("audit: {e}"));
                    return Ok(());
                }
            };
            let dead_letter = catalogs.ident(&target.dead_letter);
            if !catalogs.catalog().table_exists(&dead_letter).await? {
                out.skipped.push(format!("audit: no dead-letter table {dead_letter}"));
                return Ok(());
            }
            let audit = crate::services::audit::audit_of(catalogs, &target).await?;
            // A failed audit fails the invocation: the schedule's alarms must see it.
            if audit.verdict == crate::services::audit::Verdict::Fail {
                out.error = Some(audit.verdict_line());
            }
            out.audit = Some(audit);
        }
        Action::Report => {}
    }
    Ok(())
}

pub(crate) fn action_name(action: Action) -> &'static str {
    match action {
        Action::PurgeTombstones => "purge-tombstones",
        Action::Compact => "compact",
        Action::Upgrade => "upgrade",
        Action::RewriteManifests => "rewrite-manifests",
        Action::Expire => "expire",
        Action::RemoveOrphans => "remove-orphans",
        Action::ReplayDeadLetters => "replay-dead-letters",
        Action::Audit => "audit",
        Action::Report => "report",
    }
}

/// The manifest files of one snapshot.
pub(crate) async fn manifests_of(table: &Table, snapshot: &SnapshotRef) -> Result<Vec<ManifestFile>> {
    Ok(crate::engine::commit::manifest_cache::manifest_list(table, snapshot).await?.as_ref().clone())
}

/// What a set of snapshots references: manifest lists, manifests, and the data and delete
/// files in those manifests (live entries in `live_files`, every entry in `any_files`).
#[derive(Debug, Default)]
pub(crate) struct Referenced {
    pub manifest_lists: HashSet<String>,
    pub manifests: HashSet<String>,
    /// Files live in at least one of the snapshots, with their content and size.
    pub live_files: HashMap<String, (DataContentType, u64)>,
    /// Files named by any entry, deleted entries included.
    pub any_files: HashSet<String>,
}

/// Collect what `snapshots` reference, loading each distinct manifest once.
pub(crate) async fn referenced_by<'a>(table: &Table, snapshots: impl IntoIterator<Item = &'a SnapshotRef>) -> Result<Referenced> {
    let mut r = Referenced::default();
    let mut to_load: Vec<ManifestFile> = Vec::new();
    for snapshot in snapshots {
        r.manifest_lists.insert(snapshot.manifest_list().to_string());
        for m in manifests_of(table, snapshot).await? {
            if r.manifests.insert(m.manifest_path.clone()) {
                to_load.push(m);
            }
        }
    }
    let reads: Vec<_> = to_load.iter().map(|m| crate::engine::commit::manifest_cache::manifest(table, m)).collect();
    let loaded: Vec<_> = futures::stream::iter(reads).buffer_unordered(8).try_collect().await?;
    for manifest in loaded {
        for entry in manifest.entries() {
            let file = entry.data_file();
            r.any_files.insert(file.file_path().to_string());
            if entry.is_alive() {
                r.live_files.insert(file.file_path().to_string(), (file.content_type(), file.file_size_in_bytes()));
            }
        }
    }
    Ok(r)
}

/// Delete `paths`, counting failures instead of stopping: what is left is unreferenced, so
/// orphan removal (which lists the table's files) deletes it on a later run.
pub(crate) async fn delete_files(table: &Table, paths: &[String], deadline: Instant) -> (usize, usize) {
    let mut deleted = 0;
    let mut failed = 0;
    for path in paths {
        if Instant::now() >= deadline {
            failed += 1;
            continue;
        }
        // Metadata is not trusted for what it names: only the table's own files go.
        if let Err(reason) = crate::engine::confine::deletable(table.metadata(), path) {
            failed += 1;
            tracing::error!(%path, %reason, "refused to delete");
            continue;
        }
        match table.file_io().delete(path).await {
            Ok(()) => deleted += 1,
            Err(e) => {
                failed += 1;
                tracing::warn!(%path, error = %e, "could not delete; the next run tries again");
            }
        }
    }
    (deleted, failed)
}

#[cfg(test)]
mod confinement_tests;
#[cfg(test)]
mod evolution_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::from_args(["hot_partition_hours=3", "orphan_margin_hours=5"]).unwrap()
    }

    #[test]
    fn the_sample_schedule_input_parses() {
        let sample: serde_json::Value = serde_json::from_str(include_str!("../../../../events/eventbridge-maintenance.json")).unwrap();
        let r = MaintenanceRequest::from_event(sample, &config()).unwrap();
        assert_eq!((r.actions, r.tables, r.dry_run), (vec![Action::Compact], vec!["vehicle_telemetry".to_string()], false));
        assert_eq!((r.settings.hot_partition_hours, r.settings.orphan_margin_hours), (3, 5));
    }

    #[test]
    fn no_action_means_all_in_the_safe_order_and_report_means_a_dry_run_of_all() {
        let r = MaintenanceRequest::from_event(serde_json::json!({}), &config()).unwrap();
        assert_eq!(r.actions, Action::SAFE_ORDER.to_vec());
        assert!(r.tables.is_empty() && !r.dry_run);
        let r = MaintenanceRequest::from_event(serde_json::Value::Null, &config()).unwrap();
        assert_eq!(r.actions, Action::SAFE_ORDER.to_vec());
        let r = MaintenanceRequest::from_event(serde_json::json!({"action": "report"}), &config()).unwrap();
        assert_eq!(r.actions, Action::SAFE_ORDER.to_vec());
        assert!(r.dry_run);
        // Lists and comma-separated names; the order is always the safe one.
        let r = MaintenanceRequest::from_event(serde_json::json!({"action": "remove-orphans,compact", "table": ["a", "b"]}), &config())
            .unwrap();
        assert_eq!(r.actions, vec![Action::Compact, Action::RemoveOrphans]);
        assert_eq!(r.tables, vec!["a", "b"]);
        let r = MaintenanceRequest::from_event(serde_json::json!({"action": "compact,purge-tombstones"}), &config()).unwrap();
        assert_eq!(r.actions, vec![Action::PurgeTombstones, Action::Compact]);
        // An EventBridge rule event wraps the input in `detail`.
        let r = MaintenanceRequest::from_event(serde_json::json!({"detail": {"action": "expire", "dry_run": true}}), &config()).unwrap();
        assert_eq!((r.actions, r.dry_run), (vec![Action::Expire], true));
    }

    #[test]
    fn audit_and_replay_run_only_when_asked_for_replay_first_with_its_filter() {
        let r = MaintenanceRequest::from_event(serde_json::json!({}), &config()).unwrap();
        assert!(!r.actions.contains(&Action::Audit) && !r.actions.contains(&Action::ReplayDeadLetters));
        let input = serde_json::json!({"action": "audit,replay-dead-letters", "table": "orders", "since": "6h", "reason": "avro:"});
        let r = MaintenanceRequest::from_event(input, &config()).unwrap();
        assert_eq!(r.actions, vec![Action::ReplayDeadLetters, Action::Audit]);
        assert_eq!(r.replay.reason.as_deref(), Some("avro:"));
        assert!(r.replay.since_us.is_some());
        let err =
            MaintenanceRequest::from_event(serde_json::json!({"action": "audit", "since": "soon"}), &config()).unwrap_err().to_string();
        assert!(err.contains("since=\"soon\""), "{err}");
    }

    #[test]
    fn unknown_actions_and_fields_are_rejected_with_the_allowed_names() {
        let err = MaintenanceRequest::from_event(serde_json::json!({"action": "vacuum"}), &config()).unwrap_err().to_string();
        assert!(err.contains("vacuum") && err.contains("rewrite-manifests"), "{err}");
        let err = MaintenanceRequest::from_event(serde_json::json!({"actions": "compact"}), &config()).unwrap_err().to_string();
        assert!(err.contains("actions"), "{err}");
    }
}
