################################################################################
# Queued commits (commit_mode = "queued"): ingest and cdc stage data files and a
# manifest, then send a commit request here; the committer (reserved concurrency
# 1) commits many requests per snapshot and reports failed items with SQS
# partial-batch responses. A request that keeps failing moves to the DLQ after
# `commit_queue_max_receive_count` deliveries: that is the mapping's bounded
# retry and on-failure destination.
################################################################################

locals {
  # AWS recommends a visibility timeout of at least six times the function timeout.
  commit_visibility_timeout = min(43200, 6 * var.function_settings.committer.timeout)
  # A request's staged files are unreferenced until committed, and orphan removal deletes
  # unreferenced files older than orphan_margin_hours: a request must not outlive its files.
  commit_retention = max(60, min(1209600, (var.orphan_margin_hours - 1) * 3600))
}

resource "aws_sqs_queue" "commit_dlq" {
  count = local.queued ? 1 : 0

  name                              = "${var.name}-commit-dlq"
  message_retention_seconds         = local.commit_retention
  kms_master_key_id                 = aws_kms_key.this.arn
  kms_data_key_reuse_period_seconds = 300
  tags                              = local.tags
}

resource "aws_sqs_queue" "commit" {
  count = local.queued ? 1 : 0

  name                              = "${var.name}-commit"
  visibility_timeout_seconds        = local.commit_visibility_timeout
  message_retention_seconds         = local.commit_retention
  kms_master_key_id                 = aws_kms_key.this.arn
  kms_data_key_reuse_period_seconds = 300

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.commit_dlq[0].arn
    maxReceiveCount     = var.commit_queue_max_receive_count
  })

  tags = local.tags

  lifecycle {
    precondition {
      condition     = var.commit_gap_patience < var.commit_queue_max_receive_count
      error_message = "commit_gap_patience must be below commit_queue_max_receive_count: a request waiting for an offset gap to fill would reach the DLQ first."
    }
  }
}

resource "aws_sqs_queue_redrive_allow_policy" "commit_dlq" {
  count = local.queued ? 1 : 0

  queue_url = aws_sqs_queue.commit_dlq[0].id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.commit[0].arn]
  })
}

resource "aws_lambda_event_source_mapping" "committer" {
  count = local.queued ? 1 : 0

  function_name    = aws_lambda_function.this["committer"].arn
  event_source_arn = aws_sqs_queue.commit[0].arn

  batch_size                         = var.committer_batch_size
  maximum_batching_window_in_seconds = var.committer_maximum_batching_window_in_seconds
  function_response_types            = ["ReportBatchItemFailures"]

  dynamic "metrics_config" {
    for_each = contains(var.esm_metrics, "EventCount") ? [["EventCount"]] : []

    content {
      metrics = metrics_config.value
    }
  }

  tags = local.tags

  depends_on = [aws_iam_role_policy.function]

  lifecycle {
    precondition {
      condition     = var.committer_batch_size <= 10 || var.committer_maximum_batching_window_in_seconds >= 1
      error_message = "An SQS mapping with committer_batch_size > 10 needs committer_maximum_batching_window_in_seconds >= 1."
    }
  }
}
