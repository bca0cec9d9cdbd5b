################################################################################
# Table storage and the on-failure destination.
#   catalog = "glue":     Glue database + S3 warehouse bucket
#   catalog = "s3tables": S3 table bucket (+ namespace, unreferenced-file removal)
# Failed Kafka batches go to a dedicated S3 bucket or SQS queue.
# Every bucket: versioning, SSE-KMS with the module's CMK, public access
# blocked, TLS-only policy, lifecycle rules.
################################################################################

locals {
  create_warehouse_bucket = local.glue && var.warehouse_bucket_name == null
  create_table_bucket     = !local.glue && var.table_bucket_arn == null
  warehouse_bucket_name   = local.glue ? coalesce(var.warehouse_bucket_name, try(aws_s3_bucket.this["warehouse"].id, null)) : null
  warehouse_bucket_arn    = local.glue ? "arn:${local.partition}:s3:::${local.warehouse_bucket_name}" : null
  table_bucket_arn        = local.glue ? null : coalesce(var.table_bucket_arn, try(aws_s3tables_table_bucket.this[0].arn, null))
  table_bucket_name       = local.glue ? null : element(split("/", local.table_bucket_arn), 1)

  buckets = merge(
    local.create_warehouse_bucket ? {
      warehouse = {
        prefix = "${var.name}-warehouse-"
        # Files removed by maintenance become noncurrent versions: purge them.
        expiration_days = null
      }
    } : {},
    var.on_failure_destination == "s3" ? {
      failures = {
        prefix          = "${var.name}-failures-"
        expiration_days = var.on_failure_retention_days
      }
    } : {},
    # S3 Tables has no warehouse bucket: the pipeline file goes to a small bucket of its own.
    var.pipeline_file != null && !local.glue ? {
      config = {
        prefix          = "${var.name}-config-"
        expiration_days = null
      }
    } : {},
    var.create_athena_workgroup ? {
      athena = {
        prefix          = "${var.name}-athena-"
        expiration_days = var.athena_results_retention_days
      }
    } : {}
  )
}

resource "aws_s3_bucket" "this" {
  for_each = local.buckets

  #checkov:skip=CKV_AWS_144:Iceberg metadata stores absolute s3:// paths, so a cross-region replica is not a readable table; failed-batch records are transient.
  #checkov:skip=CKV2_AWS_62:Nothing consumes object events of these buckets: Iceberg commits go through the catalog, and a failing mapping already raises the function Errors alarm.

  bucket_prefix = each.value.prefix
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  for_each = local.buckets

  bucket                  = aws_s3_bucket.this[each.key].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  rule {
    bucket_key_enabled = true

    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = local.kms_key_arn
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id

  rule {
    id     = "housekeeping"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }

    noncurrent_version_expiration {
      noncurrent_days = var.warehouse_noncurrent_version_expiration_days
    }

    expiration {
      expired_object_delete_marker = true
    }
  }

  # Records of failed batches (on-failure destination) expire after the retention.
  dynamic "rule" {
    for_each = each.value.expiration_days == null ? [] : [each.value.expiration_days]

    content {
      id     = "expire-failed-batches"
      status = "Enabled"

      filter {}

      abort_incomplete_multipart_upload {
        days_after_initiation = 1
      }

      expiration {
        days = rule.value
      }
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}

resource "aws_s3_bucket_logging" "this" {
  for_each = var.access_log_bucket == null ? {} : local.buckets

  bucket        = aws_s3_bucket.this[each.key].id
  target_bucket = var.access_log_bucket
  target_prefix = "${aws_s3_bucket.this[each.key].id}/"
}

data "aws_iam_policy_document" "bucket" {
  for_each = local.buckets

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this[each.key].arn, "${aws_s3_bucket.this[each.key].arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  statement {
    sid       = "DenyOutdatedTLS"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this[each.key].arn, "${aws_s3_bucket.this[each.key].arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "NumericLessThan"
      variable = "s3:TlsVersion"
      values   = ["1.2"]
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  for_each = local.buckets

  bucket = aws_s3_bucket.this[each.key].id
  policy = data.aws_iam_policy_document.bucket[each.key].json

  depends_on = [aws_s3_bucket_public_access_block.this]
}

################################################################################
# Glue catalog
################################################################################

resource "aws_glue_catalog_database" "this" {
  count = local.glue ? 1 : 0

  name         = var.namespace
  description  = "icestream Iceberg namespace ${var.namespace}"
  location_uri = "${local.warehouse}/${var.namespace}.db"
  tags         = local.tags
}

################################################################################
# S3 Tables
################################################################################

resource "aws_s3tables_table_bucket" "this" {
  count = local.create_table_bucket ? 1 : 0

  # No force_destroy: that argument needs provider 6.x, and the module is validated against
  # 5.100 (the provider this project can run `terraform validate`/`test` with offline).
  name = "${var.name}-tables"

  encryption_configuration = {
    sse_algorithm = "aws:kms"
    kms_key_arn   = local.kms_key_arn
  }

  # Bucket-level unreferenced-file removal; per-table compaction and snapshot
  # management are reported or set by the maintenance function
  # (ICESTREAM_S3TABLES_MAINTENANCE) because the functions create the tables.
  maintenance_configuration = {
    iceberg_unreferenced_file_removal = {
      status = "enabled"
      settings = {
        unreferenced_days = var.table_bucket_unreferenced_days
        non_current_days  = var.table_bucket_noncurrent_days
      }
    }
  }
}

resource "aws_s3tables_namespace" "this" {
  count = local.glue ? 0 : 1

  namespace        = var.namespace
  table_bucket_arn = local.table_bucket_arn
}

################################################################################
# On-failure destination as a queue (on_failure_destination = "sqs")
################################################################################

resource "aws_sqs_queue" "failures" {
  count = var.on_failure_destination == "sqs" ? 1 : 0

  name                              = "${var.name}-failed-batches"
  message_retention_seconds         = min(1209600, var.on_failure_retention_days * 86400)
  kms_master_key_id                 = local.kms_key_arn
  kms_data_key_reuse_period_seconds = 300
  tags                              = local.tags
}
