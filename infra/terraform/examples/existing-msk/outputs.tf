output "function_names" {
  description = "Deployed function names."
  value       = module.icestream.function_names
}

output "table_bucket_arn" {
  description = "S3 table bucket holding the Iceberg tables."
  value       = module.icestream.table_bucket_arn
}

output "kafka_event_source_mappings" {
  description = "Kafka mappings with their consumer groups."
  value       = module.icestream.kafka_event_source_mappings
}
