################################################################################
# Pipeline file, bring-your-own resources, queryable tables
################################################################################

variable "pipeline_file" {
  description = "Pipeline file (TOML, issue 14) listing the ingest pipelines: each block's table and exact topics define the Kafka mappings and the tables IAM is scoped to. The file and every file beside it (schemas) are uploaded to S3 and ingest gets ICESTREAM_PIPELINES. Keep it in a directory of its own. null: the single telemetry pipeline of `table`, `source_format`, `dedup` and `ingest_topics`."
  type        = string
  default     = null

  validation {
    condition     = var.pipeline_file == null || can(file(var.pipeline_file))
    error_message = "pipeline_file must name a readable file."
  }
}

variable "pipeline_prefix" {
  description = "Key prefix under which the pipeline file and its directory are uploaded (`<prefix>/<name>/...`), in the warehouse bucket (glue) or a config bucket (s3tables)."
  type        = string
  default     = "icestream-pipelines"

  validation {
    condition     = can(regex("^[a-zA-Z0-9][a-zA-Z0-9_.-]*$", var.pipeline_prefix))
    error_message = "pipeline_prefix must be one key segment of a-z, A-Z, 0-9, '_', '.', '-'."
  }
}

variable "kms_key_arn" {
  description = "Existing customer managed KMS key for everything the module encrypts. null: the module creates one. Its key policy must admit CloudWatch Logs for the log groups `/aws/lambda/<name>-*` (and the alarm topic's and S3 Tables maintenance's use when those are enabled)."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+$", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN (arn:<partition>:kms:<region>:<account>:key/<id>)."
  }
}

variable "warehouse_bucket_name" {
  description = "Existing S3 bucket for the Glue warehouse (catalog = glue); it must accept SSE-KMS with the deployment key. null: the module creates one."
  type        = string
  default     = null
}

variable "table_bucket_arn" {
  description = "Existing S3 table bucket (catalog = s3tables). null: the module creates `<name>-tables`."
  type        = string
  default     = null

  validation {
    condition     = var.table_bucket_arn == null || can(regex("^arn:aws[a-z-]*:s3tables:[a-z0-9-]+:[0-9]{12}:bucket/[a-z0-9-]+$", var.table_bucket_arn))
    error_message = "table_bucket_arn must look like arn:<partition>:s3tables:<region>:<account>:bucket/<name>."
  }
}

variable "permissions_boundary_arn" {
  description = "Permissions boundary attached to every IAM role the module creates (function, scheduler and Lake Formation roles). null: none."
  type        = string
  default     = null
}

variable "lake_formation" {
  description = "Set when the account governs its catalogs with Lake Formation. catalog = glue: the function roles get table permissions (ALL on their tables, DESCRIBE/CREATE_TABLE on the database) and `readers` (IAM principal ARNs) get SELECT/DESCRIBE on every table of the deployment. catalog = s3tables: `readers` get DESCRIBE on the namespace and SELECT/DESCRIBE on its tables in the federated catalog `s3tablescatalog/<table bucket>` (the analytics integration must be on in the account). null: IAM-only catalog access."
  type = object({
    readers = optional(list(string), [])
  })
  default = null
}

variable "s3tables_analytics_integration" {
  description = "catalog = s3tables: register the account's table buckets with Lake Formation (federated, `bucket/*`: Lake Formation takes no single bucket) through a role of the module, so Athena, Redshift and EMR can query them. Off by default: the registration is account-wide, fails with AlreadyExists where the account already has the integration (the console's \"Enable integration\", or another deployment), and `destroy` would remove it for every bucket. With it off, enable the integration once per account and region (README, \"After the first apply\"). The `s3tablescatalog` Glue catalog itself has no resource in hashicorp/aws 5.x: see output `s3tables_analytics_catalog_command`."
  type        = bool
  default     = false
}

variable "create_athena_workgroup" {
  description = "Create an Athena workgroup (engine v3) whose query results go to a KMS-encrypted bucket of the module."
  type        = bool
  default     = true
}

variable "athena_results_retention_days" {
  description = "Days after which Athena query results expire."
  type        = number
  default     = 30

  validation {
    condition     = var.athena_results_retention_days >= 1
    error_message = "athena_results_retention_days must be >= 1."
  }
}

variable "registry_secret_kms_key_arns" {
  description = "Customer managed KMS keys that encrypt the Confluent registry secrets the pipeline file names (`registry_secret`); the functions that decode records get kms:Decrypt on them through Secrets Manager. Empty: the secrets use the AWS managed key."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for k in var.registry_secret_kms_key_arns : can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/.+$", k))])
    error_message = "registry_secret_kms_key_arns must be KMS key ARNs (arn:aws:kms:<region>:<account>:key/<id>)."
  }
}
