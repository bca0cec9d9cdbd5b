# The self-managed Kafka example against the mock AWS provider (offline).

mock_provider "aws" {
  source = "../../tests/mocks"
}

variables {
  artifacts_dir     = "../../tests/fixtures/lambda"
  bootstrap_servers = ["pkc-12345.eu-west-1.aws.confluent.cloud:9092"]
  secret_arn        = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:icestream/kafka-AbCdEf"
}

run "self_managed_kafka" {
  command = apply

  assert {
    condition     = length(module.icestream.kafka_event_source_mappings) == 1 && module.icestream.recover_uri != null
    error_message = "One mapping on the self-managed cluster; discarded batches kept in S3."
  }
}
