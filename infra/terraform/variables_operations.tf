################################################################################
# Storage
################################################################################

variable "warehouse_prefix" {
  description = "Key prefix of the Iceberg warehouse in the S3 warehouse bucket (catalog = glue)."
  type        = string
  default     = "warehouse"

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_./-]*[a-zA-Z0-9]$", var.warehouse_prefix))
    error_message = "warehouse_prefix must be a non-empty key prefix without leading or trailing '/'."
  }
}

variable "warehouse_noncurrent_version_expiration_days" {
  description = "Days after which overwritten or deleted warehouse objects (noncurrent versions, e.g. files removed by maintenance) are purged."
  type        = number
  default     = 7

  validation {
    condition     = var.warehouse_noncurrent_version_expiration_days >= 1
    error_message = "warehouse_noncurrent_version_expiration_days must be >= 1."
  }
}

variable "access_log_bucket" {
  description = "Existing bucket that receives S3 server access logs of the module's buckets (prefix `<bucket name>/`). null: no access logging."
  type        = string
  default     = null
}

variable "force_destroy" {
  description = "Allow `terraform destroy` to delete non-empty buckets (warehouse, failed batches, table bucket). Keep false in production."
  type        = bool
  default     = false
}

variable "table_bucket_unreferenced_days" {
  description = "S3 Tables unreferenced-file removal: days after which unreferenced files become noncurrent (catalog = s3tables)."
  type        = number
  default     = 3

  validation {
    condition     = var.table_bucket_unreferenced_days >= 1
    error_message = "table_bucket_unreferenced_days must be >= 1."
  }
}

variable "table_bucket_noncurrent_days" {
  description = "S3 Tables unreferenced-file removal: days after which noncurrent files are deleted (catalog = s3tables)."
  type        = number
  default     = 10

  validation {
    condition     = var.table_bucket_noncurrent_days >= 1
    error_message = "table_bucket_noncurrent_days must be >= 1."
  }
}

variable "kms_deletion_window_in_days" {
  description = "Waiting period before the module's KMS key is deleted after destroy."
  type        = number
  default     = 30

  validation {
    condition     = var.kms_deletion_window_in_days >= 7 && var.kms_deletion_window_in_days <= 30
    error_message = "kms_deletion_window_in_days must be between 7 and 30."
  }
}

################################################################################
# Operations
################################################################################

variable "create_alarms" {
  description = "Create CloudWatch alarms (function errors and throttles, Kafka offset lag, dead-letter growth, commit DLQ depth)."
  type        = bool
  default     = true
}

variable "create_sns_topic" {
  description = "Create a KMS-encrypted SNS topic for the alarms. Ignored when `alarm_sns_topic_arn` is set."
  type        = bool
  default     = false
}

variable "alarm_sns_topic_arn" {
  description = "Existing SNS topic notified by the alarms (ALARM and OK). null: the topic from `create_sns_topic`, or no notification."
  type        = string
  default     = null

  validation {
    condition     = var.alarm_sns_topic_arn == null || can(regex("^arn:aws[a-z-]*:sns:", var.alarm_sns_topic_arn))
    error_message = "alarm_sns_topic_arn must be an SNS topic ARN."
  }
}

variable "alarm_error_threshold" {
  description = "Function errors per 5 minutes above which the Errors alarm fires."
  type        = number
  default     = 0

  validation {
    condition     = var.alarm_error_threshold >= 0
    error_message = "alarm_error_threshold must be >= 0."
  }
}

variable "alarm_throttle_threshold" {
  description = "Function throttles per 5 minutes above which the Throttles alarm fires."
  type        = number
  default     = 0

  validation {
    condition     = var.alarm_throttle_threshold >= 0
    error_message = "alarm_throttle_threshold must be >= 0."
  }
}

variable "alarm_offset_lag_threshold" {
  description = "Kafka OffsetLag (records behind) above which a mapping's lag alarm fires after 3 periods of 5 minutes."
  type        = number
  default     = 1000000

  validation {
    condition     = var.alarm_offset_lag_threshold >= 1
    error_message = "alarm_offset_lag_threshold must be >= 1."
  }
}

variable "alarm_dead_letter_threshold" {
  description = "Records dead-lettered per 5 minutes (icestream EMF metric DeadLettered) above which the dead-letter alarm fires."
  type        = number
  default     = 0

  validation {
    condition     = var.alarm_dead_letter_threshold >= 0
    error_message = "alarm_dead_letter_threshold must be >= 0."
  }
}

variable "alarm_freshness_threshold_ms" {
  description = "Per pipeline table: the age of the newest record at commit (icestream EMF metric NewestRecordAge, milliseconds) above which the table's freshness alarm fires."
  type        = number
  default     = 900000

  validation {
    condition     = var.alarm_freshness_threshold_ms > 0
    error_message = "alarm_freshness_threshold_ms must be > 0."
  }
}

variable "alarm_commit_queue_age_seconds" {
  description = "Age of the oldest commit request (seconds) above which the commit queue age alarm fires (commit_mode = queued)."
  type        = number
  default     = 900

  validation {
    condition     = var.alarm_commit_queue_age_seconds >= 60
    error_message = "alarm_commit_queue_age_seconds must be >= 60."
  }
}

variable "create_dashboard" {
  description = "Create a CloudWatch dashboard for the pipeline."
  type        = bool
  default     = true
}
