################################################################################
# Queued commits (commit_mode = "queued"): ingest stages data files and a
# manifest, then send a commit request here; the committer commits many
# requests per snapshot and reports failed items with SQS partial-batch
# responses.
#
# One table's commits are serial by construction: the queue is FIFO and every
# request's message group is its table (shared/src/engine/queue/sqs.rs sets
# MessageGroupId = <namespace>.<table> and a MessageDeduplicationId), so SQS
# never hands two batches of one table out at once, and hands them out in send
# order. No reserved concurrency is needed: the mapping's maximum concurrency
# holds invocations back instead of Lambda throttling them, so a throttle never
# spends one of a request's `commit_queue_max_receive_count` deliveries.
################################################################################

locals {
  # AWS recommends a visibility timeout of at least six times the function timeout.
  commit_visibility_timeout = min(43200, 6 * var.function_settings.committer.timeout)
  # A request's staged files are unreferenced until committed, and orphan removal deletes
  # unreferenced files older than orphan_margin_hours: a request must not outlive its files.
  commit_retention = max(60, min(1209600, (var.orphan_margin_hours - 1) * 3600))
  # A standard queue keeps a message's enqueue time when it moves to its DLQ, but a FIFO queue
  # (this one) resets it: the DLQ's retention counts from the move. Kept at the maximum (14 days),
  # so a dead-lettered request waits that long for its redrive (the commit-dlq alarm fires on the
  # first one), and longer than the queue keeps anything.
  commit_dlq_retention = 1209600
}

resource "aws_sqs_queue" "commit_dlq" {
  count = local.queued ? 1 : 0

  name                              = "${var.name}-commit-dlq.fifo"
  fifo_queue                        = true
  message_retention_seconds         = local.commit_dlq_retention
  kms_master_key_id                 = local.kms_key_arn
  kms_data_key_reuse_period_seconds = 300
  tags                              = local.tags
}

resource "aws_sqs_queue" "commit" {
  count = local.queued ? 1 : 0

  name                       = "${var.name}-commit.fifo"
  fifo_queue                 = true
  deduplication_scope        = "messageGroup"
  fifo_throughput_limit      = "perMessageGroupId"
  visibility_timeout_seconds = local.commit_visibility_timeout
  message_retention_seconds  = local.commit_retention
  # The writers send their own deduplication id (a digest of table and offsets).
  content_based_deduplication       = false
  kms_master_key_id                 = local.kms_key_arn
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

  # FIFO mappings take at most 10 messages and no batching window.
  batch_size              = var.committer_batch_size
  function_response_types = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = var.committer_maximum_concurrency
  }

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
      condition = (
        local.function_settings.committer.reserved_concurrent_executions == null ||
        try(local.function_settings.committer.reserved_concurrent_executions >= var.committer_maximum_concurrency, false)
      )
      error_message = "The committer's reserved concurrency must be null or at least committer_maximum_concurrency: below it Lambda throttles the mapping's invocations, and every throttle spends a delivery of the requests towards the DLQ."
    }
  }
}

# Only the writers may send commit requests (issue 52): a request is trusted no further than
# the committer checks it (shared/src/services/queued/validate.rs), and the queue admits no other
# sender. `commit_queue_redrive_principals` adds the operators who redrive the DLQ (a redrive
# sends with the caller's permissions).
resource "aws_sqs_queue_policy" "commit" {
  count = local.queued ? 1 : 0

  queue_url = aws_sqs_queue.commit[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "OnlyWritersSend"
      Effect    = "Deny"
      Principal = "*"
      Action    = "sqs:SendMessage"
      Resource  = aws_sqs_queue.commit[0].arn
      Condition = {
        ArnNotEquals = {
          "aws:PrincipalArn" = concat([for f in local.kafka_functions : aws_iam_role.function[f].arn], var.commit_queue_redrive_principals)
        }
      }
    }]
  })
}

variable "commit_queue_redrive_principals" {
  description = "IAM principal ARNs besides the writer functions' roles that may send to the commit queue: the operators who redrive its DLQ (commit_mode = queued)."
  type        = list(string)
  default     = []
}
