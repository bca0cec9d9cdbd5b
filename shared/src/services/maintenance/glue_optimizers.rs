//! Glue tables with `glue_maintenance=glue` (docs/maintenance.md): the Glue Data Catalog's table
//! optimizers compact, expire snapshots and delete orphan files, running as
//! `glue_optimizer_role_arn`. Maintenance makes sure each table it looks after has the three, set
//! from our knobs (one already so set is left alone, one set otherwise is updated), and runs only
//! the actions they do not ([`runner`], the one rule of who runs what).

use serde::Serialize;

use std::borrow::Cow;

use super::{Action, MaintenanceRequest, MaintenanceSettings, TableMaintenance};
use iceberg::TableIdent;
use iceberg::table::Table;

use crate::base::error::Result;
use crate::engine::catalog::Catalogs;
use crate::model::config::Config;

/// IAM actions of [`ensure`] on the catalog, the database and each table (`services::deployment`).
pub const GLUE_OPTIMIZER_ACTIONS: &[&str] = &["glue:GetTableOptimizer", "glue:CreateTableOptimizer", "glue:UpdateTableOptimizer"];
/// Creating or updating an optimizer hands its role to Glue.
pub const PASS_ROLE_ACTIONS: &[&str] = &["iam:PassRole"];

/// Glue's orphan deletion knows only what Iceberg metadata references, not the staged manifests
/// of queued commits (and the files they list), which wait as long as SQS keeps their requests:
/// it never deletes a file younger than our orphan removal would keep a staged one.
const ORPHAN_MIN_DAYS: i32 = (super::orphans::STAGED_RETENTION.as_secs() / 86_400) as i32;

/// Who maintains a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maintainer {
    Icestream,
    /// `glue_maintenance=glue` on the Glue catalog.
    GlueOptimizers,
    /// S3 Tables' managed maintenance.
    S3Tables,
}

impl Maintainer {
    /// As configured (S3 Tables' maintenance is always on; `report` only leaves it as it is).
    pub fn of(config: &Config) -> Self {
        match (config.catalog, &config.glue_optimizer_role) {
            (crate::model::config::CatalogKind::S3Tables, _) => Maintainer::S3Tables,
            (crate::model::config::CatalogKind::Glue, Some(_)) => Maintainer::GlueOptimizers,
            _ => Maintainer::Icestream,
        }
    }
}

/// Who runs each action `all` runs on a table maintained `by` (`own_orphans`: see [`runner`]).
pub fn runners(by: Maintainer, own_orphans: bool) -> std::collections::BTreeMap<&'static str, Runner> {
    Action::SAFE_ORDER.iter().map(|a| (super::action_name(*a), runner(by, *a, own_orphans))).collect()
}

/// Who runs one action on one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runner {
    Icestream,
    /// Glue's compaction optimizer bin-packs small files; icestream's compaction still folds
    /// delete files (position deletes, deletion vectors) into their data files.
    GlueCompactionAndIcestreamDeletes,
    GlueRetention,
    GlueOrphanFileDeletion,
    S3Tables,
}

impl Runner {
    /// Skipped by icestream entirely.
    pub fn skips(self) -> bool {
        matches!(self, Runner::GlueRetention | Runner::GlueOrphanFileDeletion | Runner::S3Tables)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Runner::Icestream => "icestream",
            Runner::GlueCompactionAndIcestreamDeletes => {
                "Glue's `compaction` optimizer (small files); icestream folds delete files into their data files"
            }
            Runner::GlueRetention => "Glue's `retention` optimizer",
            Runner::GlueOrphanFileDeletion => "Glue's `orphan_file_deletion` optimizer",
            Runner::S3Tables => "S3 Tables' managed maintenance",
        }
    }
}

/// Who runs `action` on a table maintained `by`. With `own_orphans` orphan removal stays ours:
/// an upsert table's tombstone file is named by a table property, which Glue's orphan deletion
/// does not read, and a table with `gc.enabled = false` may share files with another table
/// (ours refuses it, [`crate::engine::confine`]).
pub fn runner(by: Maintainer, action: Action, own_orphans: bool) -> Runner {
    match (by, action) {
        (Maintainer::S3Tables, Action::Compact | Action::Expire | Action::RemoveOrphans) => Runner::S3Tables,
        (Maintainer::GlueOptimizers, Action::Compact) => Runner::GlueCompactionAndIcestreamDeletes,
        (Maintainer::GlueOptimizers, Action::Expire) => Runner::GlueRetention,
        (Maintainer::GlueOptimizers, Action::RemoveOrphans) if !own_orphans => Runner::GlueOrphanFileDeletion,
        _ => Runner::Icestream,
    }
}

/// The request an action runs under `runs`: Glue's compaction packs the small files, so ours
/// only folds delete files into their data files (and says so in `out`).
pub fn request_for<'a>(runs: Runner, request: &'a MaintenanceRequest, out: &mut TableMaintenance) -> Cow<'a, MaintenanceRequest> {
    if runs != Runner::GlueCompactionAndIcestreamDeletes {
        return Cow::Borrowed(request);
    }
    out.skipped.push("compact: small files are bin-packed by Glue's `compaction` optimizer (files with deletes are folded here)".into());
    let settings = MaintenanceSettings { compact_deletes_only: true, ..request.settings.clone() };
    Cow::Owned(MaintenanceRequest { settings, ..request.clone() })
}

/// The table of who runs what, in docs/maintenance.md (a test keeps it current).
pub fn runners_markdown() -> String {
    let mut out = String::from("| action | `glue_maintenance=ours` | `glue_maintenance=glue` | S3 Tables |\n|---|---|---|---|\n");
    for name in Action::NAMES.iter().filter(|n| **n != "report") {
        let action = Action::parse(name).unwrap_or(Action::Report);
        let glue = match (runner(Maintainer::GlueOptimizers, action, false), runner(Maintainer::GlueOptimizers, action, true)) {
            (others, own) if others == own => others.describe().to_string(),
            (others, own) => format!("{}; upsert tables and tables with `gc.enabled=false`: {}", others.describe(), own.describe()),
        };
        out.push_str(&format!(
            "| `{name}` | {} | {glue} | {} |\n",
            runner(Maintainer::Icestream, action, false).describe(),
            runner(Maintainer::S3Tables, action, false).describe()
        ));
    }
    out
}

/// One optimizer as our knobs describe it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Optimizer {
    /// `compaction`, `retention` or `orphan_file_deletion`.
    pub kind: &'static str,
    pub enabled: bool,
    pub role_arn: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_retention_period_in_days: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number_of_snapshots_to_retain: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_expired_files: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphan_file_retention_period_in_days: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// Whole days covering `hours`, at least one (Glue counts retention in days).
fn days(hours: i64) -> i32 {
    i32::try_from(((hours.max(1) + 23) / 24).max(1)).unwrap_or(i32::MAX)
}

/// What of a table its optimizers depend on.
#[derive(Debug, Clone)]
pub struct TableFacts {
    pub location: String,
    /// Upsert table (a tombstone file), or `gc.enabled = false`: see [`runner`].
    pub own_orphans: bool,
    /// `gc.enabled` (not false): expired snapshots' files may be deleted.
    pub gc_enabled: bool,
}

/// The three optimizers of a table: snapshot retention from `snapshot_max_age_hours` and
/// `min_snapshots_to_keep` (expired snapshots' files deleted unless `gc.enabled = false`, as
/// ours does), orphan deletion from `orphan_margin_hours` under the table's own location, off
/// where orphans stay ours (see [`runner`]).
pub fn desired(settings: &MaintenanceSettings, role_arn: &str, table: &TableFacts) -> [Optimizer; 3] {
    let base = |kind, enabled| Optimizer {
        kind,
        enabled,
        role_arn: role_arn.to_string(),
        snapshot_retention_period_in_days: None,
        number_of_snapshots_to_retain: None,
        clean_expired_files: None,
        orphan_file_retention_period_in_days: None,
        location: None,
    };
    [
        base("compaction", true),
        Optimizer {
            snapshot_retention_period_in_days: Some(days(settings.snapshot_max_age_hours)),
            number_of_snapshots_to_retain: Some(i32::try_from(settings.min_snapshots_to_keep).unwrap_or(i32::MAX)),
            clean_expired_files: Some(table.gc_enabled),
            ..base("retention", true)
        },
        Optimizer {
            orphan_file_retention_period_in_days: Some(days(settings.orphan_margin_hours).max(ORPHAN_MIN_DAYS)),
            location: Some(table.location.trim_end_matches('/').to_string()),
            ..base(
                "orphan_file_deletion",
                runner(Maintainer::GlueOptimizers, Action::RemoveOrphans, table.own_orphans) != Runner::Icestream,
            )
        },
    ]
}

/// Who maintains `table` under `request`, and whether its orphans stay ours (see [`runner`]);
/// with `glue_maintenance=glue`, its optimizers set up first (reported in `out`).
pub async fn set_up(
    catalogs: &Catalogs,
    request: &MaintenanceRequest,
    table: &Table,
    ident: &TableIdent,
    out: &mut TableMaintenance,
) -> Result<(Maintainer, bool)> {
    let config = &request.settings.config;
    let role = match &config.glue_optimizer_role {
        _ if out.managed_by_aws.is_some() => return Ok((Maintainer::S3Tables, false)),
        None => return Ok((Maintainer::Icestream, false)),
        Some(role) => role,
    };
    let gc_enabled = crate::engine::confine::gc_enabled(table.metadata());
    let own_orphans = !gc_enabled || is_upsert(table, config, ident.name()).await?;
    let facts = TableFacts { location: table.metadata().location().to_string(), own_orphans, gc_enabled };
    let want = desired(&request.settings, role, &facts);
    out.glue_optimizers = Some(ensure(catalogs, &ident.namespace().join("."), ident.name(), &want, request.dry_run).await?);
    Ok((Maintainer::GlueOptimizers, own_orphans))
}

/// An upsert table: one with a tombstone file, or one an upsert pipeline writes (before its
/// first delete).
async fn is_upsert(table: &Table, config: &Config, name: &str) -> Result<bool> {
    if super::tombstones::has_tombstones(table) {
        return Ok(true);
    }
    if config.pipelines.is_none() {
        return Ok(false);
    }
    let (_, pipelines, _) = crate::model::pipeline::PipelineSet::pipeline_tables(config).await?;
    Ok(pipelines.iter().any(|p| p.upsert && p.table == name))
}

/// What happened to one optimizer.
#[derive(Debug, Clone, Serialize)]
pub struct OptimizerOutcome {
    #[serde(flatten)]
    pub optimizer: Optimizer,
    /// `created`, `updated`, `unchanged`, or in a dry run `would-create`, `would-update`.
    pub outcome: &'static str,
}

/// The optimizers of one table, after [`ensure`].
#[derive(Debug, Clone, Serialize)]
pub struct GlueOptimizersReport {
    pub optimizers: Vec<OptimizerOutcome>,
}

#[cfg(feature = "aws")]
mod sdk {
    use aws_sdk_glue::types::{
        IcebergOrphanFileDeletionConfiguration, IcebergRetentionConfiguration, OrphanFileDeletionConfiguration, RetentionConfiguration,
        TableOptimizerConfiguration, TableOptimizerType,
    };

    use super::Optimizer;

    pub fn kind(o: &Optimizer) -> TableOptimizerType {
        TableOptimizerType::from(o.kind)
    }

    pub fn configuration(o: &Optimizer) -> TableOptimizerConfiguration {
        let mut c = TableOptimizerConfiguration::builder().role_arn(&o.role_arn).enabled(o.enabled);
        if o.kind == "retention" {
            let iceberg = IcebergRetentionConfiguration::builder()
                .set_snapshot_retention_period_in_days(o.snapshot_retention_period_in_days)
                .set_number_of_snapshots_to_retain(o.number_of_snapshots_to_retain)
                .set_clean_expired_files(o.clean_expired_files)
                .build();
            c = c.retention_configuration(RetentionConfiguration::builder().iceberg_configuration(iceberg).build());
        }
        if o.kind == "orphan_file_deletion" {
            let iceberg = IcebergOrphanFileDeletionConfiguration::builder()
                .set_orphan_file_retention_period_in_days(o.orphan_file_retention_period_in_days)
                .set_location(o.location.clone())
                .build();
            c = c.orphan_file_deletion_configuration(OrphanFileDeletionConfiguration::builder().iceberg_configuration(iceberg).build());
        }
        c.build()
    }

    /// Whether `existing` is set as `o` says, in every field `o` sets (Glue fills in defaults of
    /// its own, such as run rates, which are left as they are).
    pub fn matches(existing: &TableOptimizerConfiguration, o: &Optimizer) -> bool {
        fn same<T: PartialEq>(want: Option<T>, got: Option<T>) -> bool {
            want.is_none() || want == got
        }
        let retention = existing.retention_configuration().and_then(|r| r.iceberg_configuration());
        let orphans = existing.orphan_file_deletion_configuration().and_then(|r| r.iceberg_configuration());
        existing.role_arn() == Some(o.role_arn.as_str())
            && existing.enabled() == Some(o.enabled)
            && same(o.snapshot_retention_period_in_days, retention.and_then(|r| r.snapshot_retention_period_in_days()))
            && same(o.number_of_snapshots_to_retain, retention.and_then(|r| r.number_of_snapshots_to_retain()))
            && same(o.clean_expired_files, retention.and_then(|r| r.clean_expired_files()))
            && same(o.orphan_file_retention_period_in_days, orphans.and_then(|r| r.orphan_file_retention_period_in_days()))
            && same(o.location.as_deref(), orphans.and_then(|r| r.location()).map(|l| l.trim_end_matches('/')))
    }
}

/// Make `database.table`'s optimizers what `want` says: created when missing, updated when set
/// otherwise, left alone when so set. Another maintenance run doing the same meanwhile is no
/// error: a create that finds one, or an update that finds none, looks again.
#[cfg(feature = "aws")]
pub async fn ensure(catalogs: &Catalogs, database: &str, table: &str, want: &[Optimizer], dry_run: bool) -> Result<GlueOptimizersReport> {
    let Some(client) = catalogs.glue_client() else {
        return Err(crate::base::error::Error::Config("glue_maintenance=glue needs catalog=glue".into()));
    };
    let resource = format!("{database}.{table}");
    // The optimizer calls name the catalog (the account) the table lives in.
    let found = client
        .get_table()
        .database_name(database)
        .name(table)
        .send()
        .await
        .map_err(|e| crate::base::aws::error("glue:GetTable", &resource, e))?;
    let catalog = found.table().and_then(|t| t.catalog_id()).unwrap_or_default().to_string();
    let mut optimizers = Vec::new();
    for o in want {
        let outcome = ensure_one(client, &catalog, database, table, o, dry_run, &resource).await?;
        optimizers.push(OptimizerOutcome { optimizer: o.clone(), outcome });
    }
    Ok(GlueOptimizersReport { optimizers })
}

#[cfg(feature = "aws")]
async fn ensure_one(
    client: &aws_sdk_glue::Client,
    catalog: &str,
    database: &str,
    table: &str,
    o: &Optimizer,
    dry_run: bool,
    resource: &str,
) -> Result<&'static str> {
    let what = format!("{resource} ({} optimizer)", o.kind);
    // Twice at most: once more after losing a race to another run.
    for _ in 0..2 {
        let got =
            client.get_table_optimizer().catalog_id(catalog).database_name(database).table_name(table).r#type(sdk::kind(o)).send().await;
        let existing = match got {
            Ok(out) => out.table_optimizer().and_then(|t| t.configuration()).cloned(),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_entity_not_found_exception()) => None,
            Err(e) => return Err(crate::base::aws::error("glue:GetTableOptimizer", &what, e)),
        };
        match existing {
            Some(c) if sdk::matches(&c, o) => return Ok("unchanged"),
            Some(_) if dry_run => return Ok("would-update"),
            None if dry_run => return Ok("would-create"),
            Some(_) => {
                let sent = client
                    .update_table_optimizer()
                    .catalog_id(catalog)
                    .database_name(database)
                    .table_name(table)
                    .r#type(sdk::kind(o))
                    .table_optimizer_configuration(sdk::configuration(o))
                    .send()
                    .await;
                match sent {
                    Ok(_) => return Ok("updated"),
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_entity_not_found_exception()) => continue,
                    Err(e) => return Err(crate::base::aws::error("glue:UpdateTableOptimizer", &what, e)),
                }
            }
            None => {
                let sent = client
                    .create_table_optimizer()
                    .catalog_id(catalog)
                    .database_name(database)
                    .table_name(table)
                    .r#type(sdk::kind(o))
                    .table_optimizer_configuration(sdk::configuration(o))
                    .send()
                    .await;
                match sent {
                    Ok(_) => return Ok("created"),
                    Err(e) if e.as_service_error().is_some_and(|s| s.is_already_exists_exception()) => continue,
                    Err(e) => return Err(crate::base::aws::error("glue:CreateTableOptimizer", &what, e)),
                }
            }
        }
    }
    Err(crate::base::error::Error::Invariant(format!(
        "{what}: created and removed again by another run while this one set it; the next run sets it"
    )))
}

/// Without the AWS clients there is no Glue catalog to reach this through.
#[cfg(not(feature = "aws"))]
pub async fn ensure(
    _catalogs: &Catalogs,
    _database: &str,
    _table: &str,
    _want: &[Optimizer],
    _dry_run: bool,
) -> Result<GlueOptimizersReport> {
    Err(crate::base::error::Error::not_built("glue_maintenance=glue", "aws"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glue_runs_compaction_retention_and_orphans_but_an_upsert_tables_orphans_stay_ours() {
        let by = Maintainer::GlueOptimizers;
        assert_eq!(runner(by, Action::Compact, false), Runner::GlueCompactionAndIcestreamDeletes);
        assert!(!runner(by, Action::Compact, false).skips(), "delete files are still folded by us");
        assert!(runner(by, Action::Expire, false).skips() && runner(by, Action::RemoveOrphans, false).skips());
        assert_eq!(runner(by, Action::RemoveOrphans, true), Runner::Icestream);
        for action in [Action::PurgeTombstones, Action::Upgrade, Action::RewriteManifests, Action::ReplayDeadLetters, Action::Audit] {
            assert_eq!(runner(by, action, false), Runner::Icestream, "{action:?}");
        }
        for action in Action::SAFE_ORDER {
            assert_eq!(runner(Maintainer::Icestream, action, true), Runner::Icestream);
        }
    }

    #[test]
    fn the_documented_table_of_who_runs_what_is_the_rule() {
        let doc = include_str!("../../../../docs/maintenance.md");
        assert!(doc.contains(&runners_markdown()), "docs/maintenance.md's table is stale; paste:\n{}", runners_markdown());
    }

    #[test]
    fn knobs_map_onto_the_optimizers_and_orphans_wait_for_queued_requests() {
        let config = Config::from_args(["snapshot_max_age_hours=49", "min_snapshots_to_keep=7", "orphan_margin_hours=72"]).unwrap();
        let settings = MaintenanceSettings::from(&config);
        let role = "arn:aws:iam::123456789012:role/opt";
        let facts = |location: &str, own_orphans, gc_enabled| TableFacts { location: location.into(), own_orphans, gc_enabled };
        let [compaction, retention, orphans] = desired(&settings, role, &facts("s3://b/wh/ns.db/t/", false, true));
        assert!(compaction.enabled && compaction.role_arn == role);
        assert_eq!((retention.snapshot_retention_period_in_days, retention.number_of_snapshots_to_retain), (Some(3), Some(7)));
        assert_eq!(retention.clean_expired_files, Some(true));
        // 72 hours is 3 days, but a queued request's staged files may wait 15.
        assert_eq!(orphans.orphan_file_retention_period_in_days, Some(15));
        assert_eq!(orphans.location.as_deref(), Some("s3://b/wh/ns.db/t"));
        assert!(orphans.enabled);
        let long = Config::from_args(["orphan_margin_hours=721", "snapshot_max_age_hours=0"]).unwrap();
        let [_, retention, orphans] = desired(&MaintenanceSettings::from(&long), role, &facts("s3://b/t", true, true));
        assert_eq!((retention.snapshot_retention_period_in_days, orphans.orphan_file_retention_period_in_days), (Some(1), Some(31)));
        assert!(!orphans.enabled, "an upsert table's tombstone file is no orphan");
        // gc.enabled = false: snapshots expire, their files stay (as ours), and no orphan goes.
        let [_, retention, orphans] = desired(&settings, role, &facts("s3://b/t", true, false));
        assert_eq!((retention.clean_expired_files, orphans.enabled), (Some(false), false));
    }

    #[test]
    fn glue_maintenance_needs_the_glue_catalog_and_a_role_arn() {
        let glue = ["catalog=glue", "warehouse=s3://b/wh", "glue_maintenance=glue"];
        let err = Config::from_args(glue).unwrap_err().to_string();
        assert!(err.contains("glue_optimizer_role_arn") && err.contains(":role/"), "{err}");
        let err = Config::from_args([&glue[..], &["glue_optimizer_role_arn=arn:aws:iam::1:user/x"]].concat()).unwrap_err().to_string();
        assert!(err.contains("arn:aws:iam::1:user/x"), "{err}");
        let role = "glue_optimizer_role_arn=arn:aws-cn:iam::123456789012:role/path/opt";
        let c = Config::from_args([&glue[..], &[role]].concat()).unwrap();
        assert_eq!(c.glue_optimizer_role.as_deref(), Some("arn:aws-cn:iam::123456789012:role/path/opt"));
        let err = Config::from_args(["glue_maintenance=glue", role]).unwrap_err().to_string();
        assert!(err.contains("catalog=glue") && err.contains("local"), "{err}");
        // `ours` needs nothing, and a role without `glue` is not used.
        assert_eq!(Config::from_args(["catalog=glue", "warehouse=s3://b/wh", role]).unwrap().glue_optimizer_role, None);
    }
}
