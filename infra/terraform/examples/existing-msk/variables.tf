variable "region" {
  description = "AWS region of the existing MSK cluster."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Name prefix of the deployment."
  type        = string
  default     = "icestream"
}

variable "msk_cluster_arn" {
  description = "ARN of the existing MSK cluster (IAM authentication enabled)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets the functions attach to (the cluster's VPC)."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups of the functions; they need HTTPS egress to the VPC endpoints or a NAT gateway."
  type        = list(string)
}

variable "ingest_topics" {
  description = "Existing telemetry topics to ingest."
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
