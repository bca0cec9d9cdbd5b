################################################################################
# Functions
################################################################################

variable "function_settings" {
  description = "Memory (MB), timeout (s) and reserved concurrency (null = none, the default: reserving fails in accounts with a low concurrency quota) per function. Kafka-triggered functions may run at most 840 s."
  type = object({
    ingest = optional(object({
      memory_size                    = optional(number, 1024)
      timeout                        = optional(number, 300)
      reserved_concurrent_executions = optional(number)
    }), {})
    maintenance = optional(object({
      memory_size                    = optional(number, 2048)
      timeout                        = optional(number, 900)
      reserved_concurrent_executions = optional(number)
    }), {})
    committer = optional(object({
      memory_size                    = optional(number, 1024)
      timeout                        = optional(number, 300)
      reserved_concurrent_executions = optional(number)
    }), {})
  })
  default = {}

  validation {
    condition = alltrue([
      for f in [var.function_settings.ingest, var.function_settings.maintenance, var.function_settings.committer] :
      f.memory_size >= 128 && f.memory_size <= 10240 && f.timeout >= 1 && f.timeout <= 900
    ])
    error_message = "function_settings: memory_size must be 128-10240 MB and timeout 1-900 s."
  }

  validation {
    condition     = var.function_settings.ingest.timeout <= 840
    error_message = "function_settings: ingest is triggered by Kafka mappings, whose functions may run at most 840 s."
  }

  validation {
    condition = alltrue([
      for f in [var.function_settings.ingest, var.function_settings.maintenance, var.function_settings.committer] :
      f.reserved_concurrent_executions == null ? true : f.reserved_concurrent_executions >= 1
    ])
    error_message = "function_settings: reserved_concurrent_executions must be null (unreserved) or >= 1."
  }
}

variable "log_retention_in_days" {
  description = "Retention of the functions' CloudWatch log groups."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_in_days)
    error_message = "log_retention_in_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)."
  }
}

variable "application_log_level" {
  description = "Level of the functions' own logs (sets RUST_LOG; FATAL = error). Lambda's application log filter stays at TRACE so the EMF metric lines, which carry no level, are never dropped."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"], var.application_log_level)
    error_message = "application_log_level must be one of: TRACE, DEBUG, INFO, WARN, ERROR, FATAL."
  }
}

variable "system_log_level" {
  description = "Lambda platform log level filter (JSON log format)."
  type        = string
  default     = "WARN"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARN"], var.system_log_level)
    error_message = "system_log_level must be one of: DEBUG, INFO, WARN."
  }
}

variable "enable_xray" {
  description = "Active X-Ray tracing for every function (adds xray:PutTraceSegments/PutTelemetryRecords to the roles)."
  type        = bool
  default     = false
}

variable "function_vpc_config" {
  description = "Attach the functions to a VPC (subnets and security groups). The VPC then needs endpoints or NAT for S3, Glue or S3 Tables, SQS, STS and CloudWatch Logs. null: functions run outside any VPC (the Kafka mappings reach MSK on their own)."
  type = object({
    subnet_ids         = list(string)
    security_group_ids = list(string)
  })
  default = null

  validation {
    condition     = var.function_vpc_config == null ? true : length(var.function_vpc_config.subnet_ids) > 0 && length(var.function_vpc_config.security_group_ids) > 0
    error_message = "function_vpc_config needs at least one subnet and one security group."
  }
}

################################################################################
# Queued committer (commit_mode = "queued")
################################################################################

variable "committer_batch_size" {
  description = "Maximum commit requests per committer invocation (a FIFO queue mapping takes at most 10; one snapshot per table per batch)."
  type        = number
  default     = 10

  validation {
    condition     = var.committer_batch_size >= 1 && var.committer_batch_size <= 10
    error_message = "committer_batch_size must be between 1 and 10 (SQS FIFO mappings)."
  }
}

variable "committer_maximum_concurrency" {
  description = "Most committer invocations the queue mapping runs at once (its scaling_config; 2-1000). Requests of one table never run concurrently whatever this is (the table is their FIFO message group); the mapping holds back instead of being throttled, so no delivery is spent on a throttle."
  type        = number
  default     = 5

  validation {
    condition     = var.committer_maximum_concurrency >= 2 && var.committer_maximum_concurrency <= 1000 && floor(var.committer_maximum_concurrency) == var.committer_maximum_concurrency
    error_message = "committer_maximum_concurrency must be a whole number from 2 to 1000."
  }
}

variable "commit_gap_patience" {
  description = "Deliveries a commit request that starts past its table's watermark+1 waits for an earlier request before the committer takes the gap as a real Kafka offset gap (knob `commit_gap_patience`). The FIFO queue delivers a table's requests in send order, so such a gap is a real one (or an earlier request in the DLQ). Must stay below `commit_queue_max_receive_count`."
  type        = number
  default     = 3

  validation {
    condition     = var.commit_gap_patience >= 1 && var.commit_gap_patience <= 100 && floor(var.commit_gap_patience) == var.commit_gap_patience
    error_message = "commit_gap_patience must be a whole number from 1 to 100."
  }
}

variable "commit_gap_retry_s" {
  description = "Seconds until a commit request deferred for an offset gap is delivered again (knob `commit_gap_retry_s`), instead of the queue's visibility timeout."
  type        = number
  default     = 30

  validation {
    condition     = var.commit_gap_retry_s >= 0 && var.commit_gap_retry_s <= 43200 && floor(var.commit_gap_retry_s) == var.commit_gap_retry_s
    error_message = "commit_gap_retry_s must be a whole number from 0 to 43200."
  }
}

variable "commit_queue_max_receive_count" {
  description = "Deliveries of a commit request before it moves to the commit dead-letter queue."
  type        = number
  default     = 10

  validation {
    condition     = var.commit_queue_max_receive_count >= 1 && var.commit_queue_max_receive_count <= 1000
    error_message = "commit_queue_max_receive_count must be between 1 and 1000."
  }
}

################################################################################
# Maintenance schedules
################################################################################

variable "maintenance_schedules" {
  description = "Schedule expression per maintenance action (purge-tombstones, compact, expire, rewrite-manifests, remove-orphans, audit); one EventBridge Scheduler schedule per action and table (purge-tombstones: the pipelines' upsert tables; audit: the ingest pipeline tables only, a failed audit fails the invocation and its Errors alarm fires). Leave an action out to not schedule it."
  type        = map(string)
  default = {
    compact             = "rate(1 hour)"
    expire              = "rate(6 hours)"
    "rewrite-manifests" = "rate(1 day)"
    "remove-orphans"    = "rate(1 day)"
    "purge-tombstones"  = "rate(1 day)"
  }

  validation {
    condition     = alltrue([for a in keys(var.maintenance_schedules) : contains(["purge-tombstones", "compact", "expire", "rewrite-manifests", "remove-orphans", "audit"], a)])
    error_message = "maintenance_schedules keys must be among: purge-tombstones, compact, expire, rewrite-manifests, remove-orphans, audit."
  }

  validation {
    condition     = alltrue([for e in values(var.maintenance_schedules) : can(regex("^(rate|cron)\\(.+\\)$", e))])
    error_message = "maintenance_schedules values must be rate(...) or cron(...) expressions."
  }
}

variable "maintenance_tables" {
  description = "Tables the maintenance schedules act on. null: the pipeline tables (or the telemetry table) with their dead-letter and changelog tables."
  type        = list(string)
  default     = null

  validation {
    condition     = var.maintenance_tables == null ? true : alltrue([for t in var.maintenance_tables : can(regex("^[a-z][a-z0-9_]{0,254}$", t))])
    error_message = "maintenance_tables entries must be lower-case table names (a-z, 0-9, '_')."
  }
}

variable "maintenance_schedule_timezone" {
  description = "Time zone of cron() maintenance schedules."
  type        = string
  default     = "UTC"
}

variable "maintenance_flexible_window_minutes" {
  description = "Flexible time window of the maintenance schedules, spreading runs over tables (0 = off)."
  type        = number
  default     = 15

  validation {
    condition     = var.maintenance_flexible_window_minutes >= 0 && var.maintenance_flexible_window_minutes <= 1440
    error_message = "maintenance_flexible_window_minutes must be between 0 and 1440."
  }
}
