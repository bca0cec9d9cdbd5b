################################################################################
# Lambda functions: provided.al2023 on arm64, handler `bootstrap`, one zip per
# workspace binary. Functions are configured only through ICESTREAM_<KEY>
# environment variables (KEY = upper-cased key of shared/src/model/config.rs), and
# each function gets only the keys it reads.
################################################################################

locals {
  env_common = {
    ICESTREAM_CATALOG           = var.catalog
    ICESTREAM_WAREHOUSE         = local.warehouse
    ICESTREAM_NAMESPACE         = var.namespace
    ICESTREAM_LOG_FORMAT        = var.log_format
    ICESTREAM_COMMIT_TIMEOUT_MS = tostring(var.commit_timeout_ms)
  }

  env_files = {
    ICESTREAM_TARGET_FILE_SIZE_BYTES = tostring(var.target_file_size_bytes)
    ICESTREAM_COMPRESSION            = var.compression
  }

  # `direct` is the functions' default: only queued mode sets the commit knobs.
  env_commit_mode = local.queued ? {
    ICESTREAM_COMMIT_MODE      = var.commit_mode
    ICESTREAM_COMMIT_QUEUE_URL = aws_sqs_queue.commit[0].url
  } : {}

  function_environment = {
    # With a pipeline file, the file names tables, formats and dedup; without, the knobs do.
    # Upsert pipelines probe keys through the key index cache.
    ingest = merge(local.env_common, local.env_files, local.env_commit_mode,
      { ICESTREAM_KEY_INDEX_CACHE_MB = tostring(var.key_index_cache_mb) },
      local.pipeline_file != null ? { ICESTREAM_PIPELINES = local.pipelines_uri } : merge(
        {
          ICESTREAM_TABLE  = var.table
          ICESTREAM_SOURCE = var.source_format
          ICESTREAM_DEDUP  = var.dedup
        },
        var.dedup == "window" ? { ICESTREAM_DEDUP_WINDOW_MINUTES = tostring(var.dedup_window_minutes) } : {}
      )
    )

    maintenance = merge(local.env_common, local.env_files,
      {
        ICESTREAM_HOT_PARTITION_HOURS    = tostring(var.hot_partition_hours)
        ICESTREAM_SNAPSHOT_MAX_AGE_HOURS = tostring(var.snapshot_max_age_hours)
        ICESTREAM_MIN_SNAPSHOTS_TO_KEEP  = tostring(var.min_snapshots_to_keep)
        ICESTREAM_ORPHAN_MARGIN_HOURS    = tostring(var.orphan_margin_hours)
        # purge-tombstones (maintenance/tombstones.rs) reads it; ingest does not.
        ICESTREAM_TOMBSTONE_RETENTION_DAYS = tostring(var.tombstone_retention_days)
      },
      local.glue ? {} : { ICESTREAM_S3TABLES_MAINTENANCE = var.s3tables_maintenance },
      # Who compacts, expires and removes orphans of Glue tables, and the role Glue's optimizers run as.
      local.glue ? { ICESTREAM_GLUE_MAINTENANCE = var.glue_maintenance } : {},
      local.glue_optimizers ? { ICESTREAM_GLUE_OPTIMIZER_ROLE_ARN = local.optimizer_role } : {},
      # A schedule without tables maintains the pipeline file's tables (and dead-letter tables).
      local.pipeline_file != null ? { ICESTREAM_PIPELINES = local.pipelines_uri } : {}
    )

    # The committer rewrites trimmed requests' files, so it needs the file knobs; with the
    # queue's URL it makes requests deferred for an offset gap visible again sooner. It commits
    # only the tables the writers' knobs name (shared/src/services/queued/validate.rs).
    committer = merge(local.env_common, local.env_files,
      local.queued ? {
        ICESTREAM_COMMIT_QUEUE_URL    = aws_sqs_queue.commit[0].url
        ICESTREAM_COMMIT_GAP_PATIENCE = tostring(var.commit_gap_patience)
        ICESTREAM_COMMIT_GAP_RETRY_S  = tostring(var.commit_gap_retry_s)
      } : {},
      local.pipeline_file != null ? { ICESTREAM_PIPELINES = local.pipelines_uri } : { ICESTREAM_TABLE = var.table }
    )
  }

  # No reserved concurrency unless asked for: reserving fails in accounts whose unreserved
  # pool would drop below 100. The committer needs none to be serial per table: its FIFO
  # queue's message group is the table (queue.tf).
  function_settings = {
    ingest      = var.function_settings.ingest
    maintenance = var.function_settings.maintenance
    committer   = var.function_settings.committer
  }

  # The functions filter their own logs (RUST_LOG); Lambda's filter stays at TRACE because it
  # would count the EMF metric lines (no `level` field) as INFO and drop them above INFO.
  rust_log = { TRACE = "trace", DEBUG = "debug", INFO = "info", WARN = "warn", ERROR = "error", FATAL = "error" }[var.application_log_level]
}

resource "aws_cloudwatch_log_group" "function" {
  for_each = local.functions

  name              = "/aws/lambda/${local.function_names[each.key]}"
  retention_in_days = var.log_retention_in_days
  kms_key_id        = local.kms_key_arn
  tags              = local.tags
}

resource "aws_lambda_function" "this" {
  for_each = local.functions

  #checkov:skip=CKV_AWS_116:Kafka and SQS mappings invoke synchronously and have their own on-failure destination / redrive DLQ; the scheduled maintenance is idempotent and re-runs on its next schedule (async retries are set to 0 below), so a function DLQ would only collect duplicates.
  #checkov:skip=CKV_AWS_272:cargo-lambda zips are built and deployed from the same pipeline; no AWS Signer profile exists for them yet.

  function_name = local.function_names[each.key]
  description   = each.value.description
  role          = aws_iam_role.function[each.key].arn

  filename         = "${local.artifacts_dir}/${each.value.binary}/bootstrap.zip"
  source_code_hash = filebase64sha256("${local.artifacts_dir}/${each.value.binary}/bootstrap.zip")
  handler          = "bootstrap"
  runtime          = "provided.al2023"
  architectures    = [var.architecture]

  memory_size                    = local.function_settings[each.key].memory_size
  timeout                        = local.function_settings[each.key].timeout
  reserved_concurrent_executions = local.function_settings[each.key].reserved_concurrent_executions

  kms_key_arn = local.kms_key_arn

  environment {
    variables = merge(local.function_environment[each.key], { RUST_LOG = local.rust_log })
  }

  logging_config {
    log_format            = "JSON"
    log_group             = aws_cloudwatch_log_group.function[each.key].name
    application_log_level = "TRACE"
    system_log_level      = var.system_log_level
  }

  tracing_config {
    mode = var.enable_xray ? "Active" : "PassThrough"
  }

  dynamic "vpc_config" {
    for_each = var.function_vpc_config == null ? [] : [var.function_vpc_config]

    content {
      subnet_ids         = vpc_config.value.subnet_ids
      security_group_ids = vpc_config.value.security_group_ids
    }
  }

  tags = local.tags

  depends_on = [aws_iam_role_policy.function]

  lifecycle {
    precondition {
      condition     = var.commit_timeout_ms < local.function_settings[each.key].timeout * 1000
      error_message = "commit_timeout_ms must be shorter than every function timeout."
    }

    precondition {
      condition     = var.glue_maintenance == "ours" || local.glue
      error_message = "glue_maintenance = \"glue\" needs catalog = \"glue\" (S3 Tables maintains its tables itself: see s3tables_maintenance)."
    }
  }
}

# Maintenance is invoked asynchronously by EventBridge Scheduler. Every run is
# idempotent and the next schedule repeats it, so Lambda does not retry.
resource "aws_lambda_function_event_invoke_config" "maintenance" {
  function_name                = aws_lambda_function.this["maintenance"].function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 3600
}
