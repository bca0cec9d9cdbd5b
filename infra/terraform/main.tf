################################################################################
# icestream: serverless Kafka (MSK) -> Apache Iceberg on AWS Lambda.
# Shared data sources and locals; each concern lives in its own file:
#   msk.tf, functions.tf, event_source_mappings.tf, schedules.tf, storage.tf,
#   queue.tf, iam.tf, monitoring.tf
################################################################################

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  partition = data.aws_partition.current.partition
  region    = data.aws_region.current.id
  account   = data.aws_caller_identity.current.account_id

  tags = merge(var.tags, { "icestream:deployment" = var.name })

  # cargo lambda build --release --arm64 --output-format zip writes
  # target/lambda/<binary>/bootstrap.zip at the workspace root.
  artifacts_dir = coalesce(var.artifacts_dir, "${path.module}/../../target/lambda")

  queued = var.commit_mode == "queued"
  glue   = var.catalog == "glue"

  # A permissions boundary on every role the module creates (null: none).
  permissions_boundary = var.permissions_boundary_arn

  # The functions of the deployment. `binary` names the workspace binary whose
  # zip is deployed; the committer exists only in queued commit mode.
  function_catalog = {
    ingest = {
      binary = "ingest"
      # The pipeline file's digest: a new file changes the configuration, so warm execution
      # environments are replaced and read the new file (they fetch it once per cold start).
      description = local.pipeline_file == null ? "icestream: MSK record batches into the telemetry table" : "icestream: MSK record batches into the pipeline tables (pipelines ${local.pipeline_digest})"
      enabled     = true
    }
    maintenance = {
      binary      = "maintenance"
      description = "icestream: scheduled compaction, snapshot expiry, manifest rewrite, orphan removal"
      enabled     = true
    }
    committer = {
      binary = "committer"
      # The digest again: the committer commits only the file's tables (a new table needs fresh environments).
      description = local.pipeline_file == null ? "icestream: commits staged files from the commit queue, one snapshot per batch" : "icestream: commits staged files from the commit queue, one snapshot per batch (pipelines ${local.pipeline_digest})"
      enabled     = local.queued
    }
  }
  functions      = { for k, v in local.function_catalog : k => v if v.enabled }
  function_names = { for k, v in local.functions : k => "${var.name}-${k}" }

  # Functions fed by Kafka mappings, and functions that write table data.
  kafka_functions  = [for k in ["ingest"] : k if contains(keys(local.functions), k)]
  writer_functions = [for k in ["ingest", "committer"] : k if contains(keys(local.functions), k)]

  # Tables each function touches (pipelines.tf: dead-letter and changelog tables included).
  ingest_tables = local.pipeline_tables
  all_tables    = distinct(concat(local.ingest_tables, coalesce(var.maintenance_tables, [])))
  function_tables = {
    ingest      = local.ingest_tables
    committer   = local.ingest_tables
    maintenance = local.all_tables
  }
  maintenance_tables = coalesce(var.maintenance_tables, local.ingest_tables)

  # Catalog warehouse: s3://bucket/prefix for Glue, the table bucket ARN for S3 Tables.
  warehouse = local.glue ? "s3://${local.warehouse_bucket_name}/${var.warehouse_prefix}" : local.table_bucket_arn

  # MSK: the cluster and the topic/group ARNs that IAM policies are scoped to.
  consumer_group_prefix = coalesce(var.consumer_group_prefix, var.name)
  kafka_mappings = merge(
    { for t in local.ingest_topics : "ingest-${t}" => {
      function = "ingest"
      topic    = t
      group    = "${local.consumer_group_prefix}-ingest-${t}"
      batch    = var.ingest_batch_size
      window   = var.ingest_maximum_batching_window_in_seconds
    } }
  )
  msk_topic_arn_prefix = replace(coalesce(local.msk_cluster_arn, "none"), ":cluster/", ":topic/")
  msk_group_arn_prefix = replace(coalesce(local.msk_cluster_arn, "none"), ":cluster/", ":group/")
  # A self-managed source: its access configurations (credentials, CA, VPC placement).
  self_managed_access = !local.self_managed ? [] : concat(
    var.self_managed_kafka.authentication == "NONE" ? [] : [{ type = var.self_managed_kafka.authentication, uri = var.self_managed_kafka.secret_arn }],
    var.self_managed_kafka.root_ca_secret_arn == null ? [] : [{ type = "SERVER_ROOT_CA_CERTIFICATE", uri = var.self_managed_kafka.root_ca_secret_arn }],
    [for s in var.self_managed_kafka.subnet_ids : { type = "VPC_SUBNET", uri = "subnet:${s}" }],
    [for g in var.self_managed_kafka.security_group_ids : { type = "VPC_SECURITY_GROUP", uri = "security_group:${g}" }],
  )
  self_managed_secrets = !local.self_managed ? [] : compact([var.self_managed_kafka.secret_arn, var.self_managed_kafka.root_ca_secret_arn])
  function_topic_arns = {
    for f in local.kafka_functions : f => [for m in values(local.kafka_mappings) : "${local.msk_topic_arn_prefix}/${m.topic}" if m.function == f]
  }
  function_group_arns = {
    for f in local.kafka_functions : f => [for m in values(local.kafka_mappings) : "${local.msk_group_arn_prefix}/${m.group}" if m.function == f]
  }

  # AWS applies retry/record-age bounds to Kafka mappings only in provisioned mode.
  kafka_error_controls = var.provisioned_pollers.enabled
  # Whether a mapping may discard a batch after its retries (variables.tf requires S3 then).
  kafka_retries_bounded = var.maximum_retry_attempts != -1 || var.maximum_record_age_in_seconds != -1

  # On-failure destination of the Kafka mappings.
  # (The bucket's ARN spelled from its name, as the warehouse's is: one source for both.)
  on_failure_destination_arn = var.on_failure_destination == "s3" ? "arn:${local.partition}:s3:::${aws_s3_bucket.this["failures"].id}" : aws_sqs_queue.failures[0].arn
  # The bucket holds nothing else: `icestream recover` reads every discarded event below it.
  recover_uri = var.on_failure_destination == "s3" ? "s3://${aws_s3_bucket.this["failures"].id}/" : null

  alarm_topic_arn = var.alarm_sns_topic_arn != null ? var.alarm_sns_topic_arn : (var.create_sns_topic ? aws_sns_topic.alarms[0].arn : null)
  alarm_actions   = local.alarm_topic_arn == null ? [] : [local.alarm_topic_arn]
}
