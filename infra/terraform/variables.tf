################################################################################
# General
################################################################################

variable "name" {
  description = "Name prefix of every resource (functions, roles, queues, buckets, alarms). Lower case, starts with a letter."
  type        = string
  default     = "icestream"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name must be 2-24 characters of a-z, 0-9 and '-', starting with a letter (it prefixes S3 bucket and IAM role names)."
  }
}

variable "tags" {
  description = "Tags added to every resource that supports them."
  type        = map(string)
  default     = {}
}

variable "artifacts_dir" {
  description = "Directory holding `<binary>/bootstrap.zip` as written by `cargo lambda build --release --arm64 --output-format zip`. null means `<module>/../../target/lambda`."
  type        = string
  default     = null
}

variable "architecture" {
  description = "Instruction set of the zips in `artifacts_dir`: `arm64` (what `make build` produces; Graviton is the cheaper Lambda) or `x86_64` (`ARCH=x86_64 make build`)."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.architecture)
    error_message = "architecture must be \"arm64\" or \"x86_64\" (the zips must be built for it: ARCH=x86_64 make build)."
  }
}

################################################################################
# MSK
################################################################################

variable "create_msk_cluster" {
  description = "Create a new MSK cluster (IAM auth, TLS in transit). false: use the existing cluster given by `msk_cluster_arn`."
  type        = bool
  default     = true
}

variable "msk_cluster_type" {
  description = "Kind of MSK cluster to create when `create_msk_cluster` is true."
  type        = string
  default     = "serverless"

  validation {
    condition     = contains(["serverless", "provisioned"], var.msk_cluster_type)
    error_message = "msk_cluster_type must be one of: serverless, provisioned."
  }
}

variable "msk_cluster_arn" {
  description = "ARN of an existing MSK cluster (provisioned or serverless, IAM authentication enabled). Required when `create_msk_cluster` is false."
  type        = string
  default     = null

  validation {
    condition     = var.msk_cluster_arn == null || can(regex("^arn:aws[a-z-]*:kafka:[a-z0-9-]+:[0-9]{12}:cluster/[^/]+/[^/]+$", var.msk_cluster_arn))
    error_message = "msk_cluster_arn must look like arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>."
  }
}

variable "vpc_id" {
  description = "VPC of the new MSK cluster (used for its security group). Required when `create_msk_cluster` is true."
  type        = string
  default     = null
}

variable "subnet_ids" {
  description = "Private subnets (2 or 3 AZs) of the new MSK cluster. Lambda's event pollers attach here too, so these subnets need a NAT gateway or VPC endpoints for STS, Lambda and the on-failure destination."
  type        = list(string)
  default     = []
}

variable "msk_client_cidr_blocks" {
  description = "CIDR blocks of Kafka producers allowed to reach the new cluster on 9098 (IAM over TLS)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.msk_client_cidr_blocks : can(cidrhost(c, 0)) && c != "0.0.0.0/0"])
    error_message = "msk_client_cidr_blocks must be valid CIDR blocks and must not be 0.0.0.0/0."
  }
}

variable "msk_https_egress_cidr_blocks" {
  description = "Where the created cluster's security group (shared with Lambda's Kafka pollers) may send HTTPS: STS, Lambda and the on-failure destination (S3 or SQS), reached through VPC endpoints or NAT. Narrow it to the VPC CIDR only when every one of them has an interface endpoint (S3 through a gateway endpoint needs S3's public addresses)."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = length(var.msk_https_egress_cidr_blocks) > 0 && alltrue([for c in var.msk_https_egress_cidr_blocks : can(cidrhost(c, 0))])
    error_message = "msk_https_egress_cidr_blocks must hold at least one valid CIDR block."
  }
}

variable "msk_kafka_version" {
  description = "Apache Kafka version of a new provisioned cluster."
  type        = string
  default     = "3.9.x"
}

variable "msk_broker_instance_type" {
  description = "Broker instance type of a new provisioned cluster."
  type        = string
  default     = "kafka.m7g.large"

  validation {
    condition     = startswith(var.msk_broker_instance_type, "kafka.")
    error_message = "msk_broker_instance_type must be an MSK broker type such as kafka.m7g.large."
  }
}

variable "msk_broker_count" {
  description = "Number of brokers of a new provisioned cluster: a multiple of the number of `subnet_ids` (MSK puts as many in each zone; a precondition checks it)."
  type        = number
  default     = 3

  validation {
    condition     = var.msk_broker_count >= 2 && floor(var.msk_broker_count) == var.msk_broker_count
    error_message = "msk_broker_count must be a whole number >= 2."
  }
}

variable "msk_broker_volume_size" {
  description = "EBS volume per broker of a new provisioned cluster, in GiB."
  type        = number
  default     = 100

  validation {
    condition     = var.msk_broker_volume_size >= 1 && var.msk_broker_volume_size <= 16384
    error_message = "msk_broker_volume_size must be between 1 and 16384 GiB."
  }
}

################################################################################
# Topics and event source mappings
################################################################################

variable "ingest_topics" {
  description = "Kafka topics consumed by the ingest function (one event source mapping and consumer group per topic)."
  type        = list(string)
  default     = ["vehicle-telemetry"]

  validation {
    condition     = length(var.ingest_topics) > 0 && alltrue([for t in var.ingest_topics : can(regex("^[a-zA-Z0-9._-]{1,249}$", t))])
    error_message = "ingest_topics needs at least one topic; topic names are 1-249 characters of a-z, A-Z, 0-9, '.', '_' and '-'."
  }
}

variable "consumer_group_prefix" {
  description = "Prefix of the consumer group ids (`<prefix>-ingest-<topic>`). Group ids must be unique among all Kafka mappings of the cluster. null means `name`."
  type        = string
  default     = null
}

variable "starting_position" {
  description = "Where a new event source mapping starts reading a topic."
  type        = string
  default     = "TRIM_HORIZON"

  validation {
    condition     = contains(["TRIM_HORIZON", "LATEST"], var.starting_position)
    error_message = "starting_position must be one of: TRIM_HORIZON, LATEST."
  }
}

variable "ingest_batch_size" {
  description = "Maximum records per ingest invocation (Lambda also caps the payload at 6 MB)."
  type        = number
  default     = 10000

  validation {
    condition     = var.ingest_batch_size >= 1 && var.ingest_batch_size <= 10000
    error_message = "ingest_batch_size must be between 1 and 10000."
  }
}

variable "ingest_maximum_batching_window_in_seconds" {
  description = "How long the ingest mapping gathers records before invoking (fewer, larger commits)."
  type        = number
  default     = 10

  validation {
    condition     = var.ingest_maximum_batching_window_in_seconds >= 0 && var.ingest_maximum_batching_window_in_seconds <= 300
    error_message = "ingest_maximum_batching_window_in_seconds must be between 0 and 300."
  }
}

variable "maximum_retry_attempts" {
  description = "Retries of a failed batch before the mapping discards it (Kafka mappings, provisioned mode). -1 (the default): retry until it succeeds, so no batch is ever skipped (a stuck partition raises the OffsetLag alarm). A bound needs `on_failure_destination = \"s3\"`: only an S3 destination keeps the discarded records, for `icestream recover`."
  type        = number
  default     = -1

  validation {
    condition     = var.maximum_retry_attempts == -1 || (var.maximum_retry_attempts >= 0 && var.maximum_retry_attempts <= 10000 && floor(var.maximum_retry_attempts) == var.maximum_retry_attempts)
    error_message = "maximum_retry_attempts must be -1 (retry until success) or a whole number between 0 and 10000."
  }

  validation {
    condition     = var.maximum_retry_attempts == -1 || var.on_failure_destination == "s3"
    error_message = "A bounded maximum_retry_attempts discards batches after the last retry: set on_failure_destination = \"s3\" (an S3 destination keeps the records, an SQS one only their offsets), so `icestream recover` can ingest them again."
  }
}

variable "maximum_record_age_in_seconds" {
  description = "Records older than this are discarded instead of retried (Kafka mappings, provisioned mode). -1 (the default): no age limit. A bound needs `on_failure_destination = \"s3\"` (see `maximum_retry_attempts`)."
  type        = number
  default     = -1

  validation {
    condition     = var.maximum_record_age_in_seconds == -1 || (var.maximum_record_age_in_seconds >= 60 && var.maximum_record_age_in_seconds <= 604800)
    error_message = "maximum_record_age_in_seconds must be -1 (no limit) or between 60 and 604800."
  }

  validation {
    condition     = var.maximum_record_age_in_seconds == -1 || var.on_failure_destination == "s3"
    error_message = "A bounded maximum_record_age_in_seconds discards batches: set on_failure_destination = \"s3\" (an S3 destination keeps the records, an SQS one only their offsets), so `icestream recover` can ingest them again."
  }
}

variable "provisioned_pollers" {
  description = "Provisioned mode of the Kafka mappings. AWS applies `maximum_retry_attempts` and `maximum_record_age_in_seconds` to Kafka mappings only in provisioned mode."
  type = object({
    enabled         = optional(bool, true)
    minimum_pollers = optional(number, 1)
    maximum_pollers = optional(number, 20)
  })
  default = {}

  validation {
    condition = (
      var.provisioned_pollers.minimum_pollers >= 1 && var.provisioned_pollers.minimum_pollers <= 200 &&
      var.provisioned_pollers.maximum_pollers >= var.provisioned_pollers.minimum_pollers && var.provisioned_pollers.maximum_pollers <= 2000
    )
    error_message = "provisioned_pollers: 1 <= minimum_pollers <= 200 and minimum_pollers <= maximum_pollers <= 2000."
  }
}

variable "allow_unbounded_kafka_retries" {
  description = "Acknowledge that with `provisioned_pollers.enabled = false` (on-demand mode) AWS ignores bounds set in `maximum_retry_attempts` / `maximum_record_age_in_seconds`: a failing batch is retried until its records leave the topic. Not needed with the default unbounded retries."
  type        = bool
  default     = false
}

variable "esm_metrics" {
  description = "Event source mapping metrics to publish (EventCount; ErrorCount and KafkaMetrics need hashicorp/aws >= 6.x); standard CloudWatch metric pricing applies."
  type        = list(string)
  default     = ["EventCount"]

  validation {
    condition     = alltrue([for m in var.esm_metrics : contains(["EventCount", "ErrorCount", "KafkaMetrics"], m)])
    error_message = "esm_metrics entries must be among: EventCount, ErrorCount, KafkaMetrics."
  }
}

variable "on_failure_destination" {
  description = "Where the Kafka mappings send batches they discard (bounded retries, or a batch over Lambda's payload limit): a dedicated S3 bucket (the whole event: `icestream recover s3://<bucket>/` ingests it again) or an SQS queue (offsets only; allowed only with the default unbounded retries)."
  type        = string
  default     = "s3"

  validation {
    condition     = contains(["s3", "sqs"], var.on_failure_destination)
    error_message = "on_failure_destination must be one of: s3, sqs."
  }
}

variable "on_failure_retention_days" {
  description = "How long failed-batch records are kept (S3 lifecycle expiration; an SQS queue keeps at most 14 days)."
  type        = number
  default     = 14

  validation {
    condition     = var.on_failure_retention_days >= 1 && var.on_failure_retention_days <= 3650
    error_message = "on_failure_retention_days must be between 1 and 3650."
  }
}
