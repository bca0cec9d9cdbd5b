//! [`KNOBS`], the single list of every knob icestream has: parsing, `--help` text,
//! docs/configuration.md's table and the Terraform check all read it.

use super::knob::{Allowed, Knob, Settings};

const MIB: &str = "134217728";

/// Every knob icestream has. Keep sorted by concern; `key` must be unique.
pub const KNOBS: &[Knob] = &[
    Knob {
        key: "catalog",
        default: "local",
        allowed: Allowed::OneOf(&["local", "glue", "s3tables"]),
        help: "Iceberg catalog: `local` = SQL catalog in SQLite at <warehouse>/catalog.db; `glue` = AWS Glue Data Catalog; `s3tables` = Amazon S3 Tables",
    },
    Knob {
        key: "warehouse",
        default: "./warehouse",
        allowed: Allowed::Text,
        help: "Where tables live: a directory for `local`, an s3:// URI for `glue`, a table-bucket ARN for `s3tables`",
    },
    Knob {
        key: "s3_path_style",
        default: "auto",
        allowed: Allowed::OneOf(&["auto", "true", "false"]),
        help: "Path-style S3 addressing for data files; auto = path style when the S3 endpoint override is an IP address or localhost (local S3-compatible servers), else virtual-host style as AWS uses",
    },
    Knob {
        key: "pipelines",
        default: "",
        allowed: Allowed::OptionalText,
        help: "Pipeline file (TOML): a path, or s3://bucket/key (fetched once per cold start, schema paths relative to it). Empty: one telemetry pipeline from `table`, `source` and `dedup` that claims every topic",
    },
    Knob {
        key: "registry_auth",
        default: "",
        allowed: Allowed::OptionalText,
        help: "Basic-auth credentials (user:password) for pipelines with registry = \"confluent\" and no `registry_secret`; never logged",
    },
    Knob {
        key: "namespace",
        default: "bigdata",
        allowed: Allowed::Text,
        help: "Iceberg namespace of every table (a pipeline file's `namespace` takes precedence)",
    },
    Knob {
        key: "table",
        default: "vehicle_telemetry",
        allowed: Allowed::Text,
        help: "Without `pipelines`: the telemetry table; its dead-letter table is <table>_dead_letter",
    },
    Knob {
        key: "source",
        default: "proto",
        allowed: Allowed::OneOf(&["proto", "avro", "json"]),
        help: "Without `pipelines`: encoding of the telemetry record values (the shipped reference schema of that format)",
    },
    Knob {
        key: "dedup",
        default: "none",
        allowed: Allowed::OneOf(&["none", "batch", "window"]),
        help: "Without `pipelines`: drop repeats of the key (vehicle_id, event_time) within the batch, or also against the table's recent partitions",
    },
    Knob {
        key: "dedup_window_minutes",
        default: "120",
        allowed: Allowed::Integer { min: 1, max: 10080 },
        help: "How far back (by the pipeline's event_time) `dedup=window` looks for earlier copies (a pipeline may set its own)",
    },
    Knob {
        key: "format_version",
        default: "",
        allowed: Allowed::OneOf(&["", "2", "3"]),
        help: "Without `pipelines`: the Iceberg format version of the telemetry table (3: deletion vectors, row lineage). Empty: a new table is 2 and an existing one keeps its own; set, an existing table of another version is refused",
    },
    Knob {
        key: "target_file_size_bytes",
        default: MIB,
        allowed: Allowed::Integer { min: 1024, max: 4_294_967_296 },
        help: "Roll to a new Parquet file past this size",
    },
    Knob {
        key: "key_index_cache_mb",
        default: "64",
        allowed: Allowed::Integer { min: 0, max: 10240 },
        help: "Upsert pipelines: memory a warm process keeps data files' footers and key page indexes in, so a batch reads only the pages its keys fall in (0: read them every batch)",
    },
    Knob {
        key: "compression",
        default: "zstd",
        allowed: Allowed::OneOf(&["zstd", "snappy", "lz4", "gzip", "none"]),
        help: "Parquet compression codec",
    },
    Knob {
        key: "commit_timeout_ms",
        default: "60000",
        allowed: Allowed::Integer { min: 100, max: 900_000 },
        help: "Longest time spent retrying one commit when no invocation deadline is known",
    },
    Knob {
        key: "commit_mode",
        default: "direct",
        allowed: Allowed::OneOf(&["direct", "queued"]),
        help: "`direct`: each invocation commits its files; `queued`: writers stage files and a manifest and send a commit request to `commit_queue_url`, and the committer function commits many requests per snapshot",
    },
    Knob {
        key: "commit_queue_url",
        default: "",
        allowed: Allowed::Url,
        help: "URL of the SQS queue that takes commit requests (required with `commit_mode=queued`)",
    },
    Knob {
        key: "commit_gap_patience",
        default: "3",
        allowed: Allowed::Integer { min: 1, max: 100 },
        help: "Committer: deliveries a request that starts past the table's watermark+1 waits for an earlier request of that partition (SQS does not keep order) before the committer moves past the gap, recorded as an open gap that a late request still fills; 1 = never wait",
    },
    Knob {
        key: "commit_gap_retry_s",
        default: "30",
        allowed: Allowed::Integer { min: 0, max: 43_200 },
        help: "Committer: a request deferred for an offset gap comes again after this many seconds, not after the queue's visibility timeout (needs `commit_queue_url`)",
    },
    Knob {
        key: "fail_point",
        default: "none",
        allowed: Allowed::OneOf(&["none", "after-write", "after-commit"]),
        help: "Crash injection for tests: abort the process after the data files are written, or right after the commit (the committer: before the staged manifests are removed and the requests acknowledged)",
    },
    Knob {
        key: "simulated_latency_ms",
        default: "0",
        allowed: Allowed::Integer { min: 0, max: 10_000 },
        help: "Benchmarks only: every catalog, storage and queue call waits this long before it is sent, as a round trip to Glue, S3 or SQS takes (a local catalog answers in microseconds, moto in about one)",
    },
    Knob {
        key: "hot_partition_hours",
        default: "1",
        allowed: Allowed::Integer { min: 0, max: 8760 },
        help: "Compaction leaves time partitions (hours/days) that reach into the last N hours alone: ingest still writes there",
    },
    Knob {
        key: "snapshot_max_age_hours",
        default: "120",
        allowed: Allowed::Integer { min: 0, max: 87_600 },
        help: "Expiry drops snapshots older than this (the current one and `min_snapshots_to_keep` newest always stay)",
    },
    Knob {
        key: "min_snapshots_to_keep",
        default: "1",
        allowed: Allowed::Integer { min: 1, max: 100_000 },
        help: "Expiry keeps at least this many newest snapshots, whatever their age",
    },
    Knob {
        key: "orphan_margin_hours",
        default: "72",
        allowed: Allowed::Integer { min: 1, max: 87_600 },
        help: "Orphan removal deletes unreferenced files only when older than this (at least 1 hour: in-flight writes are unreferenced too)",
    },
    Knob {
        key: "s3tables_maintenance",
        default: "report",
        allowed: Allowed::OneOf(&["report", "set"]),
        help: "With catalog `s3tables`: only `report` the maintenance AWS runs on each table, or `set` it from target_file_size_bytes, snapshot_max_age_hours and min_snapshots_to_keep",
    },
    Knob {
        key: "glue_maintenance",
        default: "ours",
        allowed: Allowed::OneOf(&["ours", "glue"]),
        help: "With catalog `glue`: `ours` = maintenance compacts, expires snapshots and removes orphans itself; `glue` = it sets up the Glue Data Catalog's table optimizers (compaction, retention, orphan_file_deletion) on each table it maintains, from the knobs above, and leaves those actions to them (docs/maintenance.md)",
    },
    Knob {
        key: "glue_optimizer_role_arn",
        default: "",
        allowed: Allowed::OptionalText,
        help: "With glue_maintenance=glue (required then): the IAM role Glue's table optimizers run as, arn:<partition>:iam::<account>:role/<name>",
    },
    Knob {
        key: "tombstone_retention_days",
        default: "7",
        allowed: Allowed::Integer { min: 1, max: 36_500 },
        help: "Maintenance purges a deleted key's tombstone (its delete seq) after this many days; a change older than the delete arriving later than that could resurrect the row",
    },
    Knob { key: "log_format", default: "text", allowed: Allowed::OneOf(&["text", "json"]), help: "Log line format on standard error" },
];

/// The settings of every knob icestream has (the functions' and the CLI's list).
impl Default for Settings {
    fn default() -> Self {
        Self::over(KNOBS)
    }
}
