################################################################################
# icestream configuration knobs. Each becomes ICESTREAM_<KEY> in the
# environment of the functions that read it (see locals in functions.tf).
# Allowed values mirror shared/src/model/config.rs.
################################################################################

variable "catalog" {
  description = "Iceberg catalog (knob `catalog`): `glue` (Glue database + S3 warehouse bucket) or `s3tables` (S3 table bucket). The embedded `local` catalog is not deployable."
  type        = string
  default     = "glue"

  validation {
    condition     = contains(["glue", "s3tables"], var.catalog)
    error_message = "catalog must be one of: glue, s3tables."
  }
}

variable "namespace" {
  description = "Iceberg namespace (knob `namespace`): the Glue database or S3 Tables namespace."
  type        = string
  default     = "bigdata"

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_]{0,254}$", var.namespace))
    error_message = "namespace must be lower case a-z, 0-9 and '_' (Glue and S3 Tables naming)."
  }
}

variable "table" {
  description = "Telemetry table written by ingest (knob `table`); its dead-letter table is `<table>_dead_letter`."
  type        = string
  default     = "vehicle_telemetry"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,240}$", var.table))
    error_message = "table must be lower case a-z, 0-9 and '_', starting with a letter."
  }
}

variable "source_format" {
  description = "Encoding of the ingest topics' record values (knob `source`)."
  type        = string
  default     = "proto"

  validation {
    condition     = contains(["proto", "avro", "json"], var.source_format)
    error_message = "source_format must be one of: proto, avro, json."
  }
}

variable "dedup" {
  description = "Deduplication of telemetry records by (vehicle_id, event_time) (knob `dedup`): within the batch, or also against the table's recent partitions."
  type        = string
  default     = "none"

  validation {
    condition     = contains(["none", "batch", "window"], var.dedup)
    error_message = "dedup must be one of: none, batch, window."
  }
}

variable "dedup_window_minutes" {
  description = "Window of `dedup = \"window\"` in minutes (knob `dedup_window_minutes`, set only in window mode)."
  type        = number
  default     = 120

  validation {
    condition     = var.dedup_window_minutes >= 1 && var.dedup_window_minutes <= 10080 && floor(var.dedup_window_minutes) == var.dedup_window_minutes
    error_message = "dedup_window_minutes must be a whole number between 1 and 10080."
  }
}

variable "target_file_size_bytes" {
  description = "Target Parquet data file size (knob `target_file_size_bytes`)."
  type        = number
  default     = 134217728

  validation {
    condition     = var.target_file_size_bytes >= 1024 && var.target_file_size_bytes <= 4294967296 && floor(var.target_file_size_bytes) == var.target_file_size_bytes
    error_message = "target_file_size_bytes must be a whole number from 1024 to 4294967296."
  }
}

variable "key_index_cache_mb" {
  description = "Memory (MiB) a warm ingest function keeps upsert tables' data file footers and key page indexes in, so a batch reads only the pages its keys fall in; 0 reads them every batch (knob `key_index_cache_mb`). Keep it well under the function's memory_size."
  type        = number
  default     = 64

  validation {
    condition     = var.key_index_cache_mb >= 0 && var.key_index_cache_mb <= 10240 && floor(var.key_index_cache_mb) == var.key_index_cache_mb
    error_message = "key_index_cache_mb must be a whole number from 0 to 10240."
  }
}

variable "compression" {
  description = "Parquet compression codec (knob `compression`)."
  type        = string
  default     = "zstd"

  validation {
    condition     = contains(["zstd", "snappy", "lz4", "gzip", "none"], var.compression)
    error_message = "compression must be one of: zstd, snappy, lz4, gzip, none."
  }
}

variable "commit_timeout_ms" {
  description = "Total time budget of a commit's retry-on-conflict loop (knob `commit_timeout_ms`); must stay below the function timeouts."
  type        = number
  default     = 60000

  validation {
    condition     = var.commit_timeout_ms >= 100 && var.commit_timeout_ms <= 900000 && floor(var.commit_timeout_ms) == var.commit_timeout_ms
    error_message = "commit_timeout_ms must be a whole number from 100 to 900000."
  }
}

variable "log_format" {
  description = "Format of the functions' own log lines (knob `log_format`). Lambda's log format is JSON regardless."
  type        = string
  default     = "json"

  validation {
    condition     = contains(["json", "text"], var.log_format)
    error_message = "log_format must be one of: json, text."
  }
}

variable "commit_mode" {
  description = "Commit path (knob `commit_mode`): `direct` (each invocation commits) or `queued` (writers stage files and send commit requests to SQS; the committer function commits them)."
  type        = string
  default     = "direct"

  validation {
    condition     = contains(["direct", "queued"], var.commit_mode)
    error_message = "commit_mode must be one of: direct, queued."
  }
}

variable "tombstone_retention_days" {
  description = "How long deleted keys keep their tombstone seq (knob `tombstone_retention_days`)."
  type        = number
  default     = 7

  validation {
    condition     = var.tombstone_retention_days >= 1 && floor(var.tombstone_retention_days) == var.tombstone_retention_days
    error_message = "tombstone_retention_days must be a whole number >= 1."
  }
}

################################################################################
# Maintenance knobs (maintenance function)
################################################################################

variable "hot_partition_hours" {
  description = "Compaction skips partitions younger than this (knob `hot_partition_hours`)."
  type        = number
  default     = 1

  validation {
    condition     = var.hot_partition_hours >= 0 && floor(var.hot_partition_hours) == var.hot_partition_hours
    error_message = "hot_partition_hours must be a whole number >= 0."
  }
}

variable "snapshot_max_age_hours" {
  description = "Snapshots older than this are expired (knob `snapshot_max_age_hours`)."
  type        = number
  default     = 24

  validation {
    condition     = var.snapshot_max_age_hours >= 1 && floor(var.snapshot_max_age_hours) == var.snapshot_max_age_hours
    error_message = "snapshot_max_age_hours must be a whole number >= 1."
  }
}

variable "min_snapshots_to_keep" {
  description = "Snapshots always kept by expiry (knob `min_snapshots_to_keep`)."
  type        = number
  default     = 10

  validation {
    condition     = var.min_snapshots_to_keep >= 1 && floor(var.min_snapshots_to_keep) == var.min_snapshots_to_keep
    error_message = "min_snapshots_to_keep must be a whole number >= 1."
  }
}

variable "orphan_margin_hours" {
  description = "Unreferenced files younger than this are never removed, protecting in-flight writes (knob `orphan_margin_hours`)."
  type        = number
  default     = 24

  validation {
    condition     = var.orphan_margin_hours >= 1 && floor(var.orphan_margin_hours) == var.orphan_margin_hours
    error_message = "orphan_margin_hours must be a whole number >= 1 (longer than any function timeout)."
  }
}

variable "s3tables_maintenance" {
  description = "With `catalog = \"s3tables\"`: `report` the AWS-managed table maintenance or `set` it from the knobs above (knob `s3tables_maintenance`)."
  type        = string
  default     = "set"

  validation {
    condition     = contains(["report", "set"], var.s3tables_maintenance)
    error_message = "s3tables_maintenance must be one of: report, set."
  }
}

variable "glue_maintenance" {
  description = "With `catalog = \"glue\"`: `ours` = the maintenance function compacts, expires snapshots and removes orphans; `glue` = the Glue Data Catalog's table optimizers (compaction, retention, orphan_file_deletion) do, running as a role this module creates, and the maintenance function sets them up on each table from the knobs above and runs the rest (knob `glue_maintenance`; docs/maintenance.md lists who runs what). The schedules stay as they are."
  type        = string
  default     = "ours"

  validation {
    condition     = contains(["ours", "glue"], var.glue_maintenance)
    error_message = "glue_maintenance must be one of: ours, glue."
  }
}
