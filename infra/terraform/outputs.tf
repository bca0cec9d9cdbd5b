################################################################################
# MSK
################################################################################

output "msk_cluster_arn" {
  description = "ARN of the MSK cluster the mappings consume from (created or existing); null with self_managed_kafka."
  value       = local.msk_cluster_arn
}

output "msk_bootstrap_brokers_sasl_iam" {
  description = "IAM/TLS bootstrap brokers of the MSK cluster (for producers); null with self_managed_kafka."
  value       = one(data.aws_msk_bootstrap_brokers.this[*].bootstrap_brokers_sasl_iam)
}

output "msk_security_group_id" {
  description = "Security group of the created cluster and its Lambda pollers (null for an existing cluster)."
  value       = try(aws_security_group.msk[0].id, null)
}

################################################################################
# Functions
################################################################################

output "function_names" {
  description = "Deployed function name per function (ingest, maintenance, committer)."
  value       = { for k, v in aws_lambda_function.this : k => v.function_name }
}

output "function_arns" {
  description = "Function ARN per function."
  value       = { for k, v in aws_lambda_function.this : k => v.arn }
}

output "function_role_arns" {
  description = "Execution role ARN per function."
  value       = { for k, v in aws_iam_role.function : k => v.arn }
}

output "function_environment" {
  description = "ICESTREAM_* environment per function, as set on the functions."
  value       = { for k, v in local.functions : k => local.function_environment[k] }
}

output "log_group_names" {
  description = "CloudWatch log group per function."
  value       = { for k, v in aws_cloudwatch_log_group.function : k => v.name }
}

################################################################################
# Event source mappings
################################################################################

output "kafka_event_source_mappings" {
  description = "Kafka mapping per key (`ingest-<topic>`): UUID, topic, consumer group."
  value = { for k, v in aws_lambda_event_source_mapping.kafka : k => {
    uuid              = v.uuid
    topic             = local.kafka_mappings[k].topic
    consumer_group_id = local.kafka_mappings[k].group
  } }
}

output "on_failure_destination_arn" {
  description = "S3 bucket or SQS queue receiving the Kafka batches a mapping discards."
  value       = local.on_failure_destination_arn
}

output "recover_uri" {
  description = "With on_failure_destination = \"s3\": the URI `icestream recover` (and the maintenance action `recover`, input `{\"action\":\"recover\",\"source\":...}`) reads discarded batches from; null with SQS."
  value       = local.recover_uri
}

################################################################################
# Storage
################################################################################

output "catalog" {
  description = "Catalog type in use (glue or s3tables)."
  value       = var.catalog
}

output "warehouse" {
  description = "ICESTREAM_WAREHOUSE: s3://bucket/prefix (glue) or the table bucket ARN (s3tables)."
  value       = local.warehouse
}

output "namespace" {
  description = "Iceberg namespace (Glue database or S3 Tables namespace)."
  value       = var.namespace
}

output "warehouse_bucket" {
  description = "Name of the S3 warehouse bucket (glue catalog only)."
  value       = local.warehouse_bucket_name
}

output "glue_database_name" {
  description = "Glue database of the namespace (glue catalog only)."
  value       = try(aws_glue_catalog_database.this[0].name, null)
}

output "table_bucket_arn" {
  description = "S3 table bucket ARN (s3tables catalog only)."
  value       = local.table_bucket_arn
}

output "kms_key_arn" {
  description = "ARN of the deployment's customer managed KMS key."
  value       = local.kms_key_arn
}

################################################################################
# Queued commits, schedules, operations
################################################################################

output "commit_queue_url" {
  description = "URL of the commit request queue (commit_mode = queued)."
  value       = try(aws_sqs_queue.commit[0].url, null)
}

output "commit_dlq_arn" {
  description = "ARN of the commit request dead-letter queue (commit_mode = queued)."
  value       = try(aws_sqs_queue.commit_dlq[0].arn, null)
}

output "maintenance_schedule_arns" {
  description = "EventBridge Scheduler schedule ARN per `<action>-<table>`."
  value       = { for k, v in aws_scheduler_schedule.maintenance : k => v.arn }
}

output "glue_optimizer_role_arn" {
  description = "With glue_maintenance = \"glue\": the role the Glue Data Catalog's table optimizers run as (null otherwise)."
  value       = local.optimizer_role
}

output "scheduler_role_arn" {
  description = "Role EventBridge Scheduler uses to invoke the maintenance function."
  value       = aws_iam_role.scheduler.arn
}

output "alarm_topic_arn" {
  description = "SNS topic notified by the alarms (null when none)."
  value       = local.alarm_topic_arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard name (null when not created)."
  value       = try(aws_cloudwatch_dashboard.this[0].dashboard_name, null)
}

################################################################################
# Querying the tables
################################################################################

output "reader_policy_json" {
  description = "A read-only IAM policy (JSON) for the deployment's tables: catalog and data reads, the key, and the Athena workgroup and its results. Attach it to whoever queries; with Lake Formation, also add them to `lake_formation.readers`."
  value = jsonencode({
    Version   = "2012-10-17"
    Statement = [for s in local.reader_statements : merge({ Effect = "Allow" }, s)]
  })
}

output "athena_workgroup" {
  description = "Athena workgroup for queries (null when not created)."
  value       = try(aws_athena_workgroup.this[0].name, null)
}

output "athena_results_bucket" {
  description = "Bucket of the Athena workgroup's query results (null when not created)."
  value       = try(aws_s3_bucket.this["athena"].id, null)
}

output "s3tables_reader_grant_commands" {
  description = "catalog = s3tables with lake_formation.readers: per reader, the CLI call granting SELECT/DESCRIBE on the namespace's tables in the federated catalog `s3tablescatalog/<table bucket>` (hashicorp/aws 5.x takes no such catalog id); empty otherwise."
  value       = local.s3tables_reader_grant_commands
}

output "s3tables_analytics_catalog_command" {
  description = "catalog = s3tables: the one-time CLI call that creates the `s3tablescatalog` Glue catalog over the registered table buckets (no Terraform resource in hashicorp/aws 5.x); null when it does not apply."
  value       = local.s3tables_integration ? local.s3tables_catalog_command : null
}

output "pipelines_uri" {
  description = "ICESTREAM_PIPELINES: where the uploaded pipeline file is (null without pipeline_file)."
  value       = local.pipeline_file == null ? null : local.pipelines_uri
}

output "pipelines" {
  description = "What the module read from the pipeline file: per [[pipeline]] block its table and topics (empty without pipeline_file)."
  value       = local.pipelines
}

output "ingest_tables" {
  description = "Tables ingest writes (with their dead-letter and changelog tables): what IAM, schedules and the Lake Formation grants cover."
  value       = local.ingest_tables
}

output "function_policies" {
  description = "The IAM policy (JSON) of each function's role."
  value       = { for k, v in aws_iam_role_policy.function : k => v.policy }
}
