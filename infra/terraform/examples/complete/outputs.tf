output "msk_bootstrap_brokers_sasl_iam" {
  description = "IAM/TLS bootstrap brokers for producers inside the VPC."
  value       = module.icestream.msk_bootstrap_brokers_sasl_iam
}

output "function_names" {
  description = "Deployed function names."
  value       = module.icestream.function_names
}

output "warehouse" {
  description = "Iceberg warehouse location."
  value       = module.icestream.warehouse
}

output "commit_queue_url" {
  description = "Commit request queue of the queued committer."
  value       = module.icestream.commit_queue_url
}

output "alarm_topic_arn" {
  description = "Subscribe to this topic to receive alarms."
  value       = module.icestream.alarm_topic_arn
}

output "athena_workgroup" {
  description = "Athena workgroup to query the tables in."
  value       = module.icestream.athena_workgroup
}

output "reader_policy_json" {
  description = "Read-only IAM policy for people and tools that query the tables."
  value       = module.icestream.reader_policy_json
}
