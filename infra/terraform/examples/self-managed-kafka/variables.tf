variable "region" {
  description = "AWS region of the deployment."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Name prefix of the deployment."
  type        = string
  default     = "icestream"
}

variable "bootstrap_servers" {
  description = "The cluster's bootstrap servers (host:port), e.g. Confluent Cloud's pkc-xxxxx.eu-west-1.aws.confluent.cloud:9092."
  type        = list(string)
}

variable "authentication" {
  description = "How the mappings authenticate: SASL_SCRAM_512_AUTH, SASL_SCRAM_256_AUTH, BASIC_AUTH (SASL/PLAIN: Confluent Cloud API keys) or CLIENT_CERTIFICATE_TLS_AUTH (mTLS)."
  type        = string
  default     = "BASIC_AUTH"
}

variable "secret_arn" {
  description = "Secrets Manager secret with the credentials ({\"username\": ..., \"password\": ...}, or the client certificate and key for mTLS)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets to reach brokers inside a VPC from (with security_group_ids); empty: brokers reachable over the internet."
  type        = list(string)
  default     = []
}

variable "security_group_ids" {
  description = "Security groups of the pollers in subnet_ids (egress to the brokers and HTTPS to STS, Lambda, Secrets Manager and S3)."
  type        = list(string)
  default     = []
}

variable "ingest_topics" {
  description = "Topics to ingest (one mapping and consumer group each)."
  type        = list(string)
  default     = ["vehicle-telemetry"]
}

variable "alarm_sns_topic_arn" {
  description = "Existing SNS topic for the alarms (null: alarms without notification)."
  type        = string
  default     = null
}

variable "artifacts_dir" {
  description = "Directory of the Lambda zips (`<binary>/bootstrap.zip`); null: the repository's target/lambda, where `make build` writes them."
  type        = string
  default     = null
}
