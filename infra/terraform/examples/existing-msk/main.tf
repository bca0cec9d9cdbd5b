################################################################################
# Existing MSK cluster and VPC: icestream consumes an existing cluster by ARN,
# stores tables in an S3 table bucket, commits directly, sends failed batches to
# S3 and runs its functions inside the given subnets/security groups.
#
# The cluster's own security groups must admit themselves on 9098 (Lambda's
# pollers use them), and its subnets need a NAT gateway or VPC endpoints for
# STS, Lambda and S3; the functions' subnets need S3 Tables, S3, STS and
# CloudWatch Logs endpoints (or NAT). Build the zips first: `make build`.
################################################################################

provider "aws" {
  region = var.region
}

module "icestream" {
  source = "../.."

  name          = var.name
  artifacts_dir = var.artifacts_dir
  tags          = { Example = "existing-msk", Project = "icestream" }

  create_msk_cluster = false
  msk_cluster_arn    = var.msk_cluster_arn

  function_vpc_config = {
    subnet_ids         = var.subnet_ids
    security_group_ids = var.security_group_ids
  }

  ingest_topics = var.ingest_topics

  catalog              = "s3tables"
  namespace            = "bigdata"
  s3tables_maintenance = "set"
  commit_mode          = "direct"

  on_failure_destination = "s3"

  maintenance_schedules = {
    compact = "cron(15 * * * ? *)"
    expire  = "cron(30 */6 * * ? *)"
  }

  alarm_sns_topic_arn = var.alarm_sns_topic_arn
}
