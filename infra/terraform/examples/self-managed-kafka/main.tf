################################################################################
# Self-managed Kafka example: icestream on a Kafka cluster that is not MSK
# (Confluent Cloud, Redpanda, Kafka on EC2): the mappings read its bootstrap
# servers with SASL/SCRAM (or SASL/PLAIN, mTLS) credentials from Secrets
# Manager, optionally from private subnets; tables in Glue, discarded batches
# kept in S3 for `icestream recover`.
################################################################################

provider "aws" {
  region = var.region
}

module "icestream" {
  source = "../.."

  name          = var.name
  artifacts_dir = var.artifacts_dir
  tags          = { Example = "self-managed-kafka", Project = "icestream" }

  create_msk_cluster = false
  self_managed_kafka = {
    bootstrap_servers  = var.bootstrap_servers
    authentication     = var.authentication
    secret_arn         = var.secret_arn
    subnet_ids         = var.subnet_ids
    security_group_ids = var.security_group_ids
  }

  ingest_topics = var.ingest_topics

  catalog   = "glue"
  namespace = "bigdata"

  # Retry a failing batch until it succeeds (the default); the S3 destination keeps any batch
  # Lambda discards anyway (one over the payload limit) for `icestream recover`.
  on_failure_destination = "s3"

  alarm_sns_topic_arn = var.alarm_sns_topic_arn
}
