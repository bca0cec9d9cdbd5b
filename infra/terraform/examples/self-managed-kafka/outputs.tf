output "function_names" {
  description = "Deployed function names."
  value       = module.icestream.function_names
}

output "kafka_event_source_mappings" {
  description = "Kafka mappings with their consumer groups."
  value       = module.icestream.kafka_event_source_mappings
}

output "recover_uri" {
  description = "Where discarded batches are kept: `icestream recover <uri>` ingests them."
  value       = module.icestream.recover_uri
}
