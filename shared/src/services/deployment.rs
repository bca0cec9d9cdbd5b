//! What each Lambda function needs from the deployment that runs it: the knobs it reads, the
//! AWS actions its code can call (on which resource, under which catalog and commit mode) and
//! the metrics it emits. `icestream contract` prints this as JSON, and tests/infra checks the
//! Terraform module against it, so the module cannot drift from the code.
//!
//! The action lists live next to the calls (`*_ACTIONS` constants in the modules that call
//! AWS); this module only gathers them per function.

use serde::Serialize;

use crate::engine::catalog::{
    GLUE_ACTIONS, S3TABLES_ACTIONS, S3TABLES_BUCKET_ACTIONS, S3TABLES_MAINTENANCE_ACTIONS, WAREHOUSE_PREFLIGHT_ACTIONS,
};
use crate::engine::queue::sqs::{DEFER_ACTIONS, SEND_ACTIONS};
use crate::model::pipeline::location::{PIPELINE_FETCH_ACTIONS, PIPELINE_LIST_ACTIONS};
use crate::model::registry::{GLUE_REGISTRY_ACTIONS, REGISTRY_SECRET_ACTIONS};
use crate::services::maintenance::glue_optimizers::{GLUE_OPTIMIZER_ACTIONS, PASS_ROLE_ACTIONS};
use crate::services::recover::{SOURCE_LIST_ACTIONS, SOURCE_READ_ACTIONS};

/// What an action is called on. The test maps each kind to the deployment's ARNs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Resource {
    /// The Glue Data Catalog, the namespace's database and each table the function touches.
    GlueTables,
    /// The Glue warehouse bucket itself (no key): HeadBucket, ListObjectsV2.
    WarehouseBucket,
    /// Every object under each table's location.
    TableObjects,
    /// Objects under each table's `metadata/` (metadata, manifests and lists of a commit that
    /// lost its race, which the writer removes at once).
    TableMetadataObjects,
    /// Objects under each table's `staged/` (staged manifests the committer consumed).
    TableStagedObjects,
    /// The S3 table bucket (S3 Tables catalog).
    TableBucket,
    /// The tables of the S3 table bucket (their ARNs carry ids, not names).
    TableBucketTables,
    /// The commit request queue (commit_mode = queued).
    CommitQueue,
    /// The deployment's KMS key (SSE-KMS of the warehouse, table bucket and queues).
    DeploymentKey,
    /// The pipeline file (`pipelines` = s3://bucket/key) and the schema files beside it.
    PipelineFiles,
    /// The bucket of the pipeline file, listed under the file's directory only.
    PipelineBucket,
    /// The Glue schema registries the pipelines name (`registry_name`) and their schemas.
    GlueSchemaRegistries,
    /// The Secrets Manager secrets the pipelines name (`registry_secret`).
    RegistrySecrets,
    /// The S3 on-failure destination of the Kafka mappings, listed (`recover`).
    FailureBucket,
    /// The discarded batches in it (`recover`).
    FailureObjects,
    /// The role Glue's table optimizers run as (`glue_optimizer_role_arn`).
    GlueOptimizerRole,
}

/// When a call happens: always, or only under one catalog or commit mode.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum When {
    Always,
    Glue,
    S3tables,
    Queued,
    /// The `pipelines` knob names an s3:// pipeline file.
    PipelineFile,
    /// A pipeline has `registry = "glue"`.
    GlueRegistry,
    /// A pipeline has `registry_secret`.
    RegistrySecret,
    /// The Kafka mappings discard to an S3 bucket (`on_failure_destination = "s3"`).
    FailureBucket,
    /// Glue's table optimizers maintain the tables (`glue_maintenance = glue`).
    GlueOptimizers,
}

/// A condition key the call itself satisfies, and with what value (e.g. `s3:prefix` = the
/// table's location prefix for a listing).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Condition {
    pub key: &'static str,
    pub value: &'static str,
}

/// One group of IAM actions on one kind of resource.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Calls {
    pub actions: &'static [&'static str],
    pub resource: Resource,
    pub when: When,
    pub condition: Option<Condition>,
}

const fn calls(actions: &'static [&'static str], resource: Resource, when: When) -> Calls {
    Calls { actions, resource, when, condition: None }
}

/// S3 data and metadata files through iceberg's file IO: read, write (multipart for large
/// files). SSE-KMS needs the key for both.
const FILE_IO_ACTIONS: &[&str] = &["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"];
const FILE_DELETE_ACTIONS: &[&str] = &["s3:DeleteObject"];
const KMS_ACTIONS: &[&str] = &["kms:Decrypt", "kms:GenerateDataKey"];
/// S3 Tables data access goes through these table-level actions.
const TABLE_DATA_ACTIONS: &[&str] = &["s3tables:GetTableData", "s3tables:PutTableData"];
/// Orphan removal lists each table's location (maintenance/orphans.rs).
const ORPHAN_LIST_ACTIONS: &[&str] = &["s3:ListBucket"];

/// Calls of every function that writes or reads tables through the catalog.
const CATALOG_CALLS: &[Calls] = &[
    calls(GLUE_ACTIONS, Resource::GlueTables, When::Glue),
    calls(WAREHOUSE_PREFLIGHT_ACTIONS, Resource::WarehouseBucket, When::Glue),
    calls(FILE_IO_ACTIONS, Resource::TableObjects, When::Glue),
    calls(S3TABLES_BUCKET_ACTIONS, Resource::TableBucket, When::S3tables),
    calls(S3TABLES_ACTIONS, Resource::TableBucketTables, When::S3tables),
    calls(TABLE_DATA_ACTIONS, Resource::TableBucketTables, When::S3tables),
    calls(KMS_ACTIONS, Resource::DeploymentKey, When::Always),
];

/// One function's needs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FunctionContract {
    /// The function's role name (`ingest`, `committer`, `maintenance`).
    pub function: &'static str,
    /// Every knob the function's code reads.
    pub knobs: &'static [&'static str],
    /// Knobs among `knobs` whose default is right for some deployment (the module may leave
    /// them unset); every other knob must be set.
    pub optional_knobs: &'static [&'static str],
    pub calls: &'static [&'static [Calls]],
}

/// Knobs every function reads (catalog, logging, commit budget).
const COMMON_KNOBS: [&str; 6] = ["catalog", "warehouse", "s3_path_style", "namespace", "log_format", "commit_timeout_ms"];
/// Local servers and tests only: never set by a deployment.
const LOCAL_ONLY_KNOBS: [&str; 3] = ["s3_path_style", "fail_point", "simulated_latency_ms"];

macro_rules! knobs {
    ($($k:expr),* $(,)?) => {{
        const LIST: &[&str] = &[COMMON_KNOBS[0], COMMON_KNOBS[1], COMMON_KNOBS[2], COMMON_KNOBS[3], COMMON_KNOBS[4], COMMON_KNOBS[5], $($k),*];
        LIST
    }};
}

pub const INGEST: FunctionContract = FunctionContract {
    function: "ingest",
    knobs: knobs![
        "target_file_size_bytes",
        "compression",
        "fail_point",
        "simulated_latency_ms",
        "commit_mode",
        "commit_queue_url",
        "pipelines",
        "table",
        "source",
        "dedup",
        "dedup_window_minutes",
        "registry_auth",
        "key_index_cache_mb"
    ],
    // Direct commits leave commit_mode/commit_queue_url unset; a pipeline file replaces
    // table/source/dedup; the dedup window matters only with dedup = window; registry
    // credentials come from a secret the file names, or this knob, or none.
    optional_knobs: &[
        LOCAL_ONLY_KNOBS[0],
        LOCAL_ONLY_KNOBS[1],
        LOCAL_ONLY_KNOBS[2],
        "commit_mode",
        "commit_queue_url",
        "pipelines",
        "table",
        "source",
        "dedup",
        "dedup_window_minutes",
        "registry_auth",
    ],
    calls: &[
        CATALOG_CALLS,
        &[
            calls(FILE_DELETE_ACTIONS, Resource::TableMetadataObjects, When::Glue),
            calls(SEND_ACTIONS, Resource::CommitQueue, When::Queued),
            PIPELINE_FILE_CALLS[0],
            PIPELINE_FILE_CALLS[1],
            calls(GLUE_REGISTRY_ACTIONS, Resource::GlueSchemaRegistries, When::GlueRegistry),
            calls(REGISTRY_SECRET_ACTIONS, Resource::RegistrySecrets, When::RegistrySecret),
        ],
    ],
};

/// Fetching an s3:// pipeline file with everything beside it (ingest and maintenance, once
/// per cold start: `pipeline/location.rs`).
const PIPELINE_FILE_CALLS: [Calls; 2] = [
    calls(PIPELINE_FETCH_ACTIONS, Resource::PipelineFiles, When::PipelineFile),
    Calls {
        actions: PIPELINE_LIST_ACTIONS,
        resource: Resource::PipelineBucket,
        when: When::PipelineFile,
        condition: Some(Condition { key: "s3:prefix", value: "pipeline-directory" }),
    },
];

pub const COMMITTER: FunctionContract = FunctionContract {
    function: "committer",
    // The writers' table knobs: the committer commits only the tables they name
    // (`queued/validate.rs`).
    knobs: knobs![
        "target_file_size_bytes",
        "compression",
        "fail_point",
        "simulated_latency_ms",
        "commit_queue_url",
        "commit_gap_patience",
        "commit_gap_retry_s",
        "pipelines",
        "table"
    ],
    optional_knobs: &[LOCAL_ONLY_KNOBS[0], LOCAL_ONLY_KNOBS[1], LOCAL_ONLY_KNOBS[2], "pipelines", "table"],
    calls: &[
        CATALOG_CALLS,
        &[
            calls(FILE_DELETE_ACTIONS, Resource::TableMetadataObjects, When::Glue),
            calls(FILE_DELETE_ACTIONS, Resource::TableStagedObjects, When::Glue),
            calls(DEFER_ACTIONS, Resource::CommitQueue, When::Queued),
            PIPELINE_FILE_CALLS[0],
            PIPELINE_FILE_CALLS[1],
        ],
    ],
};

pub const MAINTENANCE: FunctionContract = FunctionContract {
    function: "maintenance",
    knobs: knobs![
        "target_file_size_bytes",
        "compression",
        "hot_partition_hours",
        "snapshot_max_age_hours",
        "min_snapshots_to_keep",
        "orphan_margin_hours",
        "s3tables_maintenance",
        "glue_maintenance",
        "glue_optimizer_role_arn",
        "tombstone_retention_days",
        "pipelines",
        "table",
        "source",
        "dedup",
        "simulated_latency_ms"
    ],
    // Without a pipeline file, maintenance looks after every table of the namespace, and
    // `replay-dead-letters` decodes with the pipeline that table/source/dedup describe.
    optional_knobs: &[
        LOCAL_ONLY_KNOBS[0],
        LOCAL_ONLY_KNOBS[2],
        "s3tables_maintenance",
        "glue_maintenance",
        "glue_optimizer_role_arn",
        "pipelines",
        "table",
        "source",
        "dedup",
    ],
    calls: &[
        CATALOG_CALLS,
        &[
            calls(FILE_DELETE_ACTIONS, Resource::TableObjects, When::Glue),
            // A request without tables lists the namespace's (maintenance/mod.rs).
            calls(&["glue:GetTables"], Resource::GlueTables, When::Glue),
            Calls {
                actions: ORPHAN_LIST_ACTIONS,
                resource: Resource::WarehouseBucket,
                when: When::Glue,
                condition: Some(Condition { key: "s3:prefix", value: "table-location-prefix" }),
            },
            calls(S3TABLES_MAINTENANCE_ACTIONS, Resource::TableBucketTables, When::S3tables),
            calls(&["s3tables:GetTableBucketMaintenanceConfiguration"], Resource::TableBucket, When::S3tables),
            // Glue's table optimizers set up on each table, running as the role passed to Glue.
            calls(GLUE_OPTIMIZER_ACTIONS, Resource::GlueTables, When::GlueOptimizers),
            Calls {
                actions: PASS_ROLE_ACTIONS,
                resource: Resource::GlueOptimizerRole,
                when: When::GlueOptimizers,
                condition: Some(Condition { key: "iam:PassedToService", value: "glue.amazonaws.com" }),
            },
            PIPELINE_FILE_CALLS[0],
            PIPELINE_FILE_CALLS[1],
            // `replay-dead-letters` and `recover` decode with the ingest pipeline, registries too.
            calls(GLUE_REGISTRY_ACTIONS, Resource::GlueSchemaRegistries, When::GlueRegistry),
            calls(REGISTRY_SECRET_ACTIONS, Resource::RegistrySecrets, When::RegistrySecret),
            // `recover` reads the batches the Kafka mappings discarded (recover.rs).
            calls(SOURCE_LIST_ACTIONS, Resource::FailureBucket, When::FailureBucket),
            calls(SOURCE_READ_ACTIONS, Resource::FailureObjects, When::FailureBucket),
        ],
    ],
};

impl FunctionContract {
    /// `ICESTREAM_*` variables of `env` that name a knob this function never reads: a
    /// deployment mistake worth a warning at cold start (the value is silently without effect).
    pub fn unread_knobs<I: IntoIterator<Item = (String, String)>>(&self, env: I) -> Vec<String> {
        let mut unread: Vec<String> = env
            .into_iter()
            .filter_map(|(name, _)| name.strip_prefix(crate::model::config::ENV_PREFIX).map(str::to_ascii_lowercase))
            .filter(|key| !self.knobs.contains(&key.as_str()))
            .map(|key| format!("{}{}", crate::model::config::ENV_PREFIX, key.to_ascii_uppercase()))
            .collect();
        unread.sort();
        unread
    }

    /// Warn once at cold start about knobs set on this function that it ignores.
    pub fn warn_unread_knobs(&self) {
        let unread = self.unread_knobs(std::env::vars());
        if !unread.is_empty() {
            tracing::warn!(function = self.function, ?unread, "environment sets knobs this function does not read");
        }
    }
}

/// Every Lambda function of a deployment.
pub const FUNCTIONS: [FunctionContract; 3] = [INGEST, COMMITTER, MAINTENANCE];

/// How writers address the commit queue: the queue must be FIFO with the table as message group.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CommitQueueContract {
    /// `sqs.rs` sets MessageGroupId to this (`<namespace>.<table>`) on a `.fifo` queue URL.
    pub message_group: &'static str,
    /// `sqs.rs` sets MessageDeduplicationId itself (no content-based deduplication needed).
    pub deduplication_id: &'static str,
}

/// The whole contract as JSON (`icestream contract`).
pub fn contract_json(metrics: serde_json::Value) -> serde_json::Value {
    let functions: serde_json::Map<String, serde_json::Value> = FUNCTIONS
        .iter()
        .map(|f| {
            let flat: Vec<&Calls> = f.calls.iter().flat_map(|group| group.iter()).collect();
            let mut value = serde_json::json!({"knobs": f.knobs, "optional_knobs": f.optional_knobs, "calls": flat});
            value["metrics"] = metrics.get(f.function).cloned().unwrap_or(serde_json::Value::Null);
            // Metrics of the per-table lines (dimensions Function and Table).
            value["table_metrics"] = metrics.get(format!("{}_per_table", f.function)).cloned().unwrap_or(serde_json::Value::Null);
            (f.function.to_string(), value)
        })
        .collect();
    serde_json::json!({
        "functions": functions,
        "metrics": {
            "namespace": crate::services::metrics::NAMESPACE,
            "dimensions": [[crate::services::metrics::DIMENSION], [crate::services::metrics::DIMENSION, crate::services::metrics::TABLE_DIMENSION]],
            "table_dimension": crate::services::metrics::TABLE_DIMENSION,
            "dimension_value_env": crate::services::metrics::FUNCTION_NAME_ENV,
        },
        "commit_queue": CommitQueueContract { message_group: "table", deduplication_id: "request-offsets" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::KNOBS;

    #[test]
    fn every_listed_knob_exists_and_optional_ones_are_read() {
        for f in FUNCTIONS {
            for k in f.knobs {
                assert!(KNOBS.iter().any(|knob| knob.key == *k), "{}: no knob {k}", f.function);
            }
            for k in f.optional_knobs {
                assert!(f.knobs.contains(k), "{}: optional knob {k} is not read", f.function);
            }
        }
    }

    #[test]
    fn unread_knobs_are_named() {
        let env = [("ICESTREAM_TOMBSTONE_RETENTION_DAYS", "7"), ("ICESTREAM_DEDUP_WINDOW_MINUTES", "5"), ("RUST_LOG", "info")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(INGEST.unread_knobs(env.clone()), vec!["ICESTREAM_TOMBSTONE_RETENTION_DAYS".to_string()]);
        assert!(MAINTENANCE.unread_knobs(env).contains(&"ICESTREAM_DEDUP_WINDOW_MINUTES".to_string()));
    }

    #[test]
    fn actions_are_iam_action_names() {
        for f in FUNCTIONS {
            for group in f.calls {
                for c in group.iter() {
                    for a in c.actions {
                        let (service, name) = a.split_once(':').unwrap_or_default();
                        assert!(!service.is_empty() && name.chars().next().is_some_and(|ch| ch.is_ascii_uppercase()), "{a}");
                        assert!(!name.ends_with("Batch"), "{a}: batch APIs are authorised by the single action");
                    }
                }
            }
        }
    }
}
