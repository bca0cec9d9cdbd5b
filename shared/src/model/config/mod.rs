//! One typed definition of every knob, with two spellings: `key=value` on the command line and
//! `ICESTREAM_KEY` in a function's environment, so the CLI and the functions share one
//! configuration.
//!
//! [`KNOBS`] is the single list: parsing, `--help` text, docs/configuration.md's table and the Terraform
//! check all read it. An unknown key or a bad value stops start-up with a message that names
//! the key and what it allows.

mod knob;
mod knobs;

use std::fmt;
use std::path::PathBuf;

pub use knob::{Allowed, ENV_PREFIX, Knob, Settings, knobs_markdown};
pub use knobs::KNOBS;

use crate::base::error::{Error, Result};

/// Encoding of telemetry record values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Proto,
    Avro,
    Json,
}

/// Duplicate suppression on a pipeline's `key` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedup {
    None,
    Batch,
    Window,
}

impl fmt::Display for Dedup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dedup::None => "none",
            Dedup::Batch => "batch",
            Dedup::Window => "window",
        })
    }
}

/// Where a test may crash the process on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPoint {
    None,
    AfterWrite,
    AfterCommit,
}

/// How appends reach the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitMode {
    /// Each invocation commits its own files.
    Direct,
    /// Stage files and send a commit request to this SQS queue URL.
    Queued { queue_url: String },
}

/// Which Iceberg catalog holds the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogKind {
    Local,
    Glue,
    S3Tables,
}

/// `arn:<partition>:s3tables:<region>:<account>:bucket/<name>` in any AWS partition (`aws`,
/// `aws-cn`, `aws-us-gov`, ...): the module deploys to all of them.
fn is_table_bucket_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    matches!(parts.as_slice(), ["arn", partition, "s3tables", region, account, resource]
        if partition.starts_with("aws") && !region.is_empty() && !account.is_empty()
            && resource.strip_prefix("bucket/").is_some_and(|name| !name.is_empty() && !name.contains('/')))
}

/// A secret knob value: printed as `<redacted>`, read with [`Redacted::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(pub String);

impl Redacted {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The typed configuration every entry point takes.
#[derive(Debug, Clone)]
pub struct Config {
    pub catalog: CatalogKind,
    pub warehouse: String,
    /// `None`: decided from the S3 endpoint ([`crate::base::aws::s3_path_style`]).
    pub s3_path_style: Option<bool>,
    pub namespace: String,
    /// The pipeline file (`pipelines`), if any.
    pub pipelines: Option<String>,
    /// `registry_auth`: Confluent registry credentials (`user:password`).
    pub registry_auth: Option<Redacted>,
    pub table: String,
    pub source: Source,
    pub dedup: Dedup,
    pub dedup_window_minutes: i64,
    /// `format_version` (2 or 3) when set.
    pub format_version: Option<u8>,
    pub target_file_size_bytes: usize,
    /// Upsert pipelines: the bound of the key index cache (`keyed::key_index`), in bytes.
    pub key_index_cache_bytes: usize,
    pub compression: String,
    pub commit_timeout_ms: u64,
    pub commit_mode: CommitMode,
    /// Committer: deliveries a request with an offset gap waits for an earlier request.
    pub commit_gap_patience: u32,
    /// Committer: seconds until a deferred request is delivered again.
    pub commit_gap_retry_s: i32,
    /// `commit_queue_url` as given (also when `commit_mode=direct`).
    commit_queue_url_raw: Option<String>,
    pub fail_point: FailPoint,
    /// Added to every catalog, storage and queue call (`simulated_latency_ms`, benchmarks).
    pub simulated_latency: std::time::Duration,
    pub hot_partition_hours: i64,
    pub snapshot_max_age_hours: i64,
    pub min_snapshots_to_keep: usize,
    pub orphan_margin_hours: i64,
    /// S3 Tables: write the managed maintenance settings from the knobs (else only report them).
    pub s3tables_maintenance_set: bool,
    /// Glue: the role Glue's table optimizers run as, when they maintain the tables (`glue_maintenance=glue`).
    pub glue_optimizer_role: Option<String>,
    pub tombstone_retention_days: i64,
    pub log_format: String,
}

impl Config {
    /// Configuration from the process environment (functions).
    pub fn from_env() -> Result<Self> {
        let mut settings = Settings::default();
        settings.apply_env(std::env::vars())?;
        Self::from_settings(&settings)
    }

    /// Configuration from the environment, then `key=value` words on top (the CLI).
    pub fn from_env_and_args<I, S>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut settings = Settings::default();
        settings.apply_env(std::env::vars())?;
        settings.apply_args(args)?;
        Self::from_settings(&settings)
    }

    /// Configuration from `key=value` words only (tests, tools).
    pub fn from_args<I, S>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut settings = Settings::default();
        settings.apply_args(args)?;
        Self::from_settings(&settings)
    }

    pub fn from_settings(s: &Settings) -> Result<Self> {
        Self {
            catalog: match s.get("catalog") {
                "glue" => CatalogKind::Glue,
                "s3tables" => CatalogKind::S3Tables,
                _ => CatalogKind::Local,
            },
            warehouse: s.get("warehouse").to_string(),
            s3_path_style: match s.get("s3_path_style") {
                "auto" => None,
                v => Some(v == "true"),
            },
            namespace: s.get("namespace").to_string(),
            pipelines: Some(s.get("pipelines").trim().to_string()).filter(|p| !p.is_empty()),
            registry_auth: Some(s.get("registry_auth").to_string()).filter(|a| !a.is_empty()).map(Redacted),
            table: s.get("table").to_string(),
            source: match s.get("source") {
                "avro" => Source::Avro,
                "json" => Source::Json,
                _ => Source::Proto,
            },
            dedup: match s.get("dedup") {
                "batch" => Dedup::Batch,
                "window" => Dedup::Window,
                _ => Dedup::None,
            },
            dedup_window_minutes: s.parse("dedup_window_minutes")?,
            format_version: s.get("format_version").parse().ok(),
            target_file_size_bytes: s.parse("target_file_size_bytes")?,
            key_index_cache_bytes: s.parse::<usize>("key_index_cache_mb")? * 1024 * 1024,
            compression: s.get("compression").to_string(),
            commit_timeout_ms: s.parse("commit_timeout_ms")?,
            commit_mode: commit_mode(s)?,
            commit_gap_patience: s.parse("commit_gap_patience")?,
            commit_gap_retry_s: s.parse("commit_gap_retry_s")?,
            commit_queue_url_raw: Some(s.get("commit_queue_url").to_string()).filter(|u| !u.is_empty()),
            fail_point: match s.get("fail_point") {
                "after-write" => FailPoint::AfterWrite,
                "after-commit" => FailPoint::AfterCommit,
                _ => FailPoint::None,
            },
            simulated_latency: std::time::Duration::from_millis(s.parse("simulated_latency_ms")?),
            hot_partition_hours: s.parse("hot_partition_hours")?,
            snapshot_max_age_hours: s.parse("snapshot_max_age_hours")?,
            min_snapshots_to_keep: s.parse("min_snapshots_to_keep")?,
            orphan_margin_hours: s.parse("orphan_margin_hours")?,
            s3tables_maintenance_set: s.get("s3tables_maintenance") == "set",
            glue_optimizer_role: glue_optimizer_role(s)?,
            tombstone_retention_days: s.parse("tombstone_retention_days")?,
            log_format: s.get("log_format").to_string(),
        }
        .check_warehouse()
    }

    /// The warehouse must fit the catalog: checked at start so a deployment fails fast.
    fn check_warehouse(self) -> Result<Self> {
        let w = &self.warehouse;
        let ok = match self.catalog {
            CatalogKind::Local => !w.contains("://") && !w.starts_with("arn:"),
            CatalogKind::Glue => w.starts_with("s3://") && w.len() > 5,
            CatalogKind::S3Tables => is_table_bucket_arn(w),
        };
        if ok {
            Ok(self)
        } else {
            Err(Error::Config(format!(
                "bad value {w:?} for `warehouse` (ICESTREAM_WAREHOUSE) with catalog {:?}: allowed is a directory for local, \
                 s3://bucket/prefix for glue, arn:<partition>:s3tables:<region>:<account>:bucket/<name> for s3tables",
                self.catalog
            )))
        }
    }

    /// The warehouse as an absolute local directory (catalog `local`).
    pub fn local_warehouse_dir(&self) -> Result<PathBuf> {
        let path = PathBuf::from(&self.warehouse);
        std::fs::create_dir_all(&path).map_err(|e| Error::Config(format!("warehouse directory {}: {e}", path.display())))?;
        path.canonicalize().map_err(|e| Error::Config(format!("warehouse directory {}: {e}", path.display())))
    }

    /// The commit queue's URL, if set (the committer's `poll` reads it in either mode).
    pub fn commit_queue_url(&self) -> Option<&str> {
        match &self.commit_mode {
            CommitMode::Queued { queue_url } => Some(queue_url),
            CommitMode::Direct => self.commit_queue_url_raw.as_deref(),
        }
    }

    /// Name of the dead-letter table that goes with the telemetry table.
    pub fn dead_letter_table(&self) -> String {
        format!("{}_dead_letter", self.table)
    }
}

/// `commit_mode` with its queue: queued mode without a queue URL stops start-up.
fn commit_mode(s: &Settings) -> Result<CommitMode> {
    let url = s.get("commit_queue_url");
    match s.get("commit_mode") {
        "queued" if url.is_empty() => Err(Error::Config(
            "`commit_queue_url` (ICESTREAM_COMMIT_QUEUE_URL) is required with commit_mode=queued: \
             set it to the URL of the commit request queue (https://sqs.<region>.amazonaws.com/<account>/<name>)"
                .to_string(),
        )),
        #[cfg(not(feature = "aws"))]
        "queued" => Err(Error::not_built("commit_mode=queued (the SQS commit request queue)", "aws")),
        #[cfg(feature = "aws")]
        "queued" => Ok(CommitMode::Queued { queue_url: url.to_string() }),
        _ => Ok(CommitMode::Direct),
    }
}

/// `glue_maintenance=glue` with its role: only on the Glue catalog, and never without a role ARN.
fn glue_optimizer_role(s: &Settings) -> Result<Option<String>> {
    let arn = s.get("glue_optimizer_role_arn").trim();
    if s.get("glue_maintenance") != "glue" {
        return Ok(None);
    }
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let is_role = matches!(parts.as_slice(), ["arn", partition, "iam", "", account, resource]
        if partition.starts_with("aws") && !account.is_empty() && resource.strip_prefix("role/").is_some_and(|n| !n.is_empty()));
    match (s.get("catalog"), is_role) {
        ("glue", true) => Ok(Some(arn.to_string())),
        ("glue", false) => Err(Error::Config(format!(
            "bad value {arn:?} for `glue_optimizer_role_arn` (ICESTREAM_GLUE_OPTIMIZER_ROLE_ARN): glue_maintenance=glue needs the \
             role Glue's table optimizers run as, arn:<partition>:iam::<account>:role/<name>"
        ))),
        (catalog, _) => Err(Error::Config(format!(
            "`glue_maintenance` (ICESTREAM_GLUE_MAINTENANCE) = glue needs catalog=glue, not {catalog}: the table optimizers are the Glue Data Catalog's"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse() {
        let c = Config::from_args(Vec::<String>::new()).unwrap();
        assert_eq!(c.namespace, "bigdata");
        assert_eq!(c.table, "vehicle_telemetry");
        assert_eq!(c.source, Source::Proto);
        assert_eq!(c.compression, "zstd");
        assert_eq!(c.dead_letter_table(), "vehicle_telemetry_dead_letter");
    }

    #[test]
    fn every_default_is_allowed_and_keys_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for k in KNOBS {
            k.check(k.default).unwrap();
            assert!(seen.insert(k.key), "duplicate knob {}", k.key);
        }
    }

    #[test]
    fn bad_value_names_key_and_allowed_values() {
        let err = Config::from_args(["source=xml"]).unwrap_err().to_string();
        assert!(err.contains("`source`"), "{err}");
        assert!(err.contains("proto|avro|json"), "{err}");
        let err = Config::from_args(["target_file_size_bytes=12"]).unwrap_err().to_string();
        assert!(err.contains("target_file_size_bytes") && err.contains("1024"), "{err}");
    }

    #[test]
    fn unknown_key_and_unknown_env_are_rejected() {
        let err = Config::from_args(["sauce=proto"]).unwrap_err().to_string();
        assert!(err.contains("unknown key `sauce`") && err.contains("source"), "{err}");
        let mut s = Settings::default();
        let err = s.apply_env([("ICESTREAM_SAUCE".to_string(), "x".to_string())]).unwrap_err().to_string();
        assert!(err.contains("ICESTREAM_SAUCE") && err.contains("ICESTREAM_SOURCE"), "{err}");
    }

    #[test]
    fn warehouse_must_fit_the_catalog() {
        let err = Config::from_args(["catalog=glue", "warehouse=./wh"]).unwrap_err().to_string();
        assert!(err.contains("`warehouse`") && err.contains("s3://"), "{err}");
        Config::from_args(["catalog=glue", "warehouse=s3://bucket/wh"]).unwrap();
        let err = Config::from_args(["catalog=s3tables", "warehouse=s3://b"]).unwrap_err().to_string();
        assert!(err.contains("arn:<partition>:s3tables"), "{err}");
        Config::from_args(["catalog=s3tables", "warehouse=arn:aws:s3tables:us-east-1:123456789012:bucket/t"]).unwrap();
        // Every partition the Terraform module deploys to.
        Config::from_args(["catalog=s3tables", "warehouse=arn:aws-cn:s3tables:cn-north-1:123456789012:bucket/t"]).unwrap();
        Config::from_args(["catalog=s3tables", "warehouse=arn:aws-us-gov:s3tables:us-gov-west-1:123456789012:bucket/t"]).unwrap();
        for bad in ["arn:azure:s3tables:r:1:bucket/t", "arn:aws:s3:::t", "arn:aws:s3tables:r:1:bucket/", "arn:aws:s3tables:r:1:bucket/t/x"]
        {
            assert!(Config::from_args(["catalog=s3tables", &format!("warehouse={bad}")]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_documented_knob_table_is_the_knob_list() {
        // Regenerate with `icestream help` when a knob changes.
        let doc = include_str!("../../../../docs/configuration.md");
        assert!(doc.contains(&knobs_markdown(KNOBS)), "docs/configuration.md's knob table is stale: paste `icestream help`'s table");
    }

    #[test]
    fn orphan_margin_is_at_least_an_hour() {
        let err = Config::from_args(["orphan_margin_hours=0"]).unwrap_err().to_string();
        assert!(err.contains("orphan_margin_hours") && err.contains("from 1"), "{err}");
        assert_eq!(Config::from_args(["orphan_margin_hours=1"]).unwrap().orphan_margin_hours, 1);
    }

    #[test]
    fn queued_mode_needs_a_queue_url() {
        assert_eq!(Config::from_args(Vec::<String>::new()).unwrap().commit_mode, CommitMode::Direct);
        let err = Config::from_args(["commit_mode=queued"]).unwrap_err().to_string();
        assert!(err.contains("`commit_queue_url`") && err.contains("commit_mode=queued"), "{err}");
        let err = Config::from_args(["commit_queue_url=sqs/q"]).unwrap_err().to_string();
        assert!(err.contains("`commit_queue_url`") && err.contains("http"), "{err}");
        let url = "http://127.0.0.1:5000/123456789012/commits";
        let c = Config::from_args(["commit_mode=queued", &format!("commit_queue_url={url}")]).unwrap();
        assert_eq!(c.commit_mode, CommitMode::Queued { queue_url: url.to_string() });
    }

    #[test]
    fn env_spelling_maps_to_key_and_args_override() {
        let mut s = Settings::default();
        s.apply_env([("ICESTREAM_SOURCE".to_string(), "avro".to_string()), ("PATH".to_string(), "/bin".to_string())]).unwrap();
        assert_eq!(Config::from_settings(&s).unwrap().source, Source::Avro);
        s.apply_args(["source=json"]).unwrap();
        assert_eq!(Config::from_settings(&s).unwrap().source, Source::Json);
    }
}
