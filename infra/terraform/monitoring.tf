################################################################################
# Operations: alarms (function errors and throttles, Kafka offset lag,
# dead-letter growth from the functions' Embedded Metric Format lines, commit
# DLQ depth) to an optional SNS topic, and a dashboard.
# EMF: namespace `icestream`, metric `DeadLettered`, dimension `Function` =
# the deployed function name (AWS_LAMBDA_FUNCTION_NAME; shared/src/services/metrics.rs).
# Per pipeline table, the ingest function's per-table EMF lines (dimensions
# Function and Table: Written, DeadLettered, RecordAgeP50/P99/Max,
# NewestRecordAge, CommitLatency) feed a freshness alarm (NewestRecordAge above
# alarm_freshness_threshold_ms), a dead-letter alarm and the dashboard's rows.
# tests/infra/test_contract.py checks every icestream alarm and widget against
# what `icestream contract` says the code emits.
################################################################################

locals {
  emf_namespace          = "icestream"
  dead_letter_functions  = [for f in ["ingest"] : f if contains(keys(local.functions), f)]
  lambda_metric_dims     = { for k, v in local.function_names : k => { FunctionName = v } }
  failure_queue_alarmed  = var.create_alarms && var.on_failure_destination == "sqs"
  commit_dlq_alarmed     = var.create_alarms && local.queued
  dashboard_function_ids = keys(local.functions)
  # Pipeline tables with per-table metrics: those the ingest function writes.
  metric_tables = contains(keys(local.functions), "ingest") ? local.ingest_table_names : []
  table_dims    = { for t in local.metric_tables : t => { Function = local.function_names["ingest"], Table = t } }
  # Queued appends commit in the committer, which reports record age per invocation
  # (MaxRecordAge), not per table: there the committer's alarm replaces the per-table ones.
  table_alarms = merge([for t in local.metric_tables : merge(local.queued ? {} : {
    "${t}-freshness" = {
      table       = t
      metric      = "NewestRecordAge"
      statistic   = "Maximum"
      threshold   = var.alarm_freshness_threshold_ms
      description = "the newest record of ${t} was over ${var.alarm_freshness_threshold_ms} ms old when it was committed (the table falls behind its topics)."
    } }, {
    "${t}-dead-lettered" = {
      table       = t
      metric      = "DeadLettered"
      statistic   = "Sum"
      threshold   = var.alarm_dead_letter_threshold
      description = "records of ${t} go to ${t}_dead_letter (undecodable input; `icestream dead-letters replay` after a fix)."
    }
  })]...)
}

resource "aws_sns_topic" "alarms" {
  count = var.create_sns_topic && var.alarm_sns_topic_arn == null ? 1 : 0

  name              = "${var.name}-alarms"
  kms_master_key_id = local.kms_key_arn
  tags              = local.tags
}

resource "aws_cloudwatch_metric_alarm" "errors" {
  for_each = var.create_alarms ? local.functions : {}

  alarm_name          = "${local.function_names[each.key]}-errors"
  alarm_description   = "icestream ${each.key}: invocations failed (infrastructure errors; bad input is dead-lettered, not failed)."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = local.lambda_metric_dims[each.key]
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.alarm_error_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "throttles" {
  for_each = var.create_alarms ? local.functions : {}

  alarm_name          = "${local.function_names[each.key]}-throttles"
  alarm_description   = "icestream ${each.key}: invocations throttled."
  namespace           = "AWS/Lambda"
  metric_name         = "Throttles"
  dimensions          = local.lambda_metric_dims[each.key]
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.alarm_throttle_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "offset_lag" {
  for_each = var.create_alarms ? toset(local.kafka_functions) : toset([])

  alarm_name          = "${local.function_names[each.key]}-offset-lag"
  alarm_description   = "icestream ${each.key}: Kafka consumer lag (OffsetLag) stays above ${var.alarm_offset_lag_threshold} records."
  namespace           = "AWS/Lambda"
  metric_name         = "OffsetLag"
  dimensions          = local.lambda_metric_dims[each.key]
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.alarm_offset_lag_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

# A discarded Kafka batch (bounded retries, or over Lambda's payload limit) is in the S3
# on-failure destination, not in its table, until `icestream recover` ingests it. The mapping
# counts deliveries there (EventCount metrics, dimension EventSourceMappingUUID).
resource "aws_cloudwatch_metric_alarm" "discarded_batches" {
  for_each = var.create_alarms && contains(var.esm_metrics, "EventCount") ? aws_lambda_event_source_mapping.kafka : {}

  alarm_name = "${var.name}-${each.key}-discarded"
  alarm_description = local.recover_uri == null ? "icestream ${each.key}: the mapping discarded a batch (over Lambda's payload limit); the on-failure queue has its offsets only." : (
    "icestream ${each.key}: the mapping discarded records to the on-failure bucket; `icestream recover ${local.recover_uri}` (or the maintenance action recover) ingests them, once."
  )
  namespace           = "AWS/Lambda"
  metric_name         = "OnFailureDestinationDeliveredEventCount"
  dimensions          = { EventSourceMappingUUID = each.value.uuid }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "dead_lettered" {
  for_each = var.create_alarms ? toset(local.dead_letter_functions) : toset([])

  alarm_name          = "${local.function_names[each.key]}-dead-lettered"
  alarm_description   = "icestream ${each.key}: records going to the dead-letter table (undecodable input)."
  namespace           = local.emf_namespace
  metric_name         = "DeadLettered"
  dimensions          = { Function = local.function_names[each.key] }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.alarm_dead_letter_threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "table" {
  for_each = var.create_alarms ? local.table_alarms : {}

  alarm_name          = "${var.name}-${each.key}"
  alarm_description   = "icestream: ${each.value.description}"
  namespace           = local.emf_namespace
  metric_name         = each.value.metric
  dimensions          = local.table_dims[each.value.table]
  statistic           = each.value.statistic
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = each.value.threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

# Queued mode: the oldest record a committer invocation committed (EMF MaxRecordAge of the
# committer), over the freshness threshold: the tables fall behind their topics.
resource "aws_cloudwatch_metric_alarm" "committer_freshness" {
  count = var.create_alarms && local.queued ? 1 : 0

  alarm_name          = "${local.function_names["committer"]}-freshness"
  alarm_description   = "icestream committer: a committed record was over ${var.alarm_freshness_threshold_ms} ms old (queued commits fall behind their topics)."
  namespace           = local.emf_namespace
  metric_name         = "MaxRecordAge"
  dimensions          = { Function = local.function_names["committer"] }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.alarm_freshness_threshold_ms
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

# Queue alarms: dead-letter queues that should stay empty, and the age of the oldest commit
# request (requests wait while their table's FIFO group is blocked: a table stopped committing).
locals {
  queue_alarms = merge(
    local.failure_queue_alarmed ? { "failed-batches" = {
      queue       = one(aws_sqs_queue.failures[*].name)
      description = "Kafka batches were discarded (over Lambda's payload limit) and their offsets sent to the on-failure queue."
      metric      = "ApproximateNumberOfMessagesVisible"
      threshold   = 0
    } } : {},
    local.commit_dlq_alarmed ? {
      "commit-dlq" = {
        queue       = one(aws_sqs_queue.commit_dlq[*].name)
        description = "commit requests failed repeatedly and moved to the commit dead-letter queue."
        metric      = "ApproximateNumberOfMessagesVisible"
        threshold   = 0
      }
      "commit-queue-age" = {
        queue       = one(aws_sqs_queue.commit[*].name)
        description = "the oldest commit request has waited over ${var.alarm_commit_queue_age_seconds} s (a table stopped committing)."
        metric      = "ApproximateAgeOfOldestMessage"
        threshold   = var.alarm_commit_queue_age_seconds
      }
    } : {},
    var.create_alarms ? { "maintenance-schedule-dlq" = {
      queue       = aws_sqs_queue.schedule_dlq.name
      description = "EventBridge Scheduler could not invoke the maintenance function (see the schedule dead-letter queue)."
      metric      = "ApproximateNumberOfMessagesVisible"
      threshold   = 0
    } } : {}
  )
}

resource "aws_cloudwatch_metric_alarm" "queue" {
  for_each = local.queue_alarms

  alarm_name          = "${var.name}-${each.key}"
  alarm_description   = "icestream: ${each.value.description}"
  namespace           = "AWS/SQS"
  metric_name         = each.value.metric
  dimensions          = { QueueName = each.value.queue }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = each.value.threshold
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.tags
}

moved {
  from = aws_cloudwatch_metric_alarm.failed_batches[0]
  to   = aws_cloudwatch_metric_alarm.queue["failed-batches"]
}

moved {
  from = aws_cloudwatch_metric_alarm.commit_dlq[0]
  to   = aws_cloudwatch_metric_alarm.queue["commit-dlq"]
}


resource "aws_cloudwatch_dashboard" "this" {
  count = var.create_dashboard ? 1 : 0

  dashboard_name = var.name
  dashboard_body = jsonencode({
    widgets = concat(
      [for i, metric in ["Invocations", "Errors", "Throttles", "Duration"] : {
        type   = "metric"
        x      = (i % 2) * 12
        y      = floor(i / 2) * 6
        width  = 12
        height = 6
        properties = {
          title   = "Lambda ${metric}"
          region  = local.region
          stat    = metric == "Duration" ? "p99" : "Sum"
          period  = 300
          view    = "timeSeries"
          metrics = [for f in local.dashboard_function_ids : ["AWS/Lambda", metric, "FunctionName", local.function_names[f], { label = f }]]
        }
      }],
      [{
        type   = "metric"
        x      = 0
        y      = 12
        width  = 12
        height = 6
        properties = {
          title   = "Kafka OffsetLag (records behind)"
          region  = local.region
          stat    = "Maximum"
          period  = 300
          view    = "timeSeries"
          metrics = [for f in local.kafka_functions : ["AWS/Lambda", "OffsetLag", "FunctionName", local.function_names[f], { label = f }]]
        }
      }],
      [{
        type   = "metric"
        x      = 12
        y      = 12
        width  = 12
        height = 6
        properties = {
          title   = "Dead-lettered records (icestream EMF)"
          region  = local.region
          stat    = "Sum"
          period  = 300
          view    = "timeSeries"
          metrics = [for f in local.dead_letter_functions : [local.emf_namespace, "DeadLettered", "Function", local.function_names[f], { label = f }]]
        }
      }],
      # Per pipeline table: freshness at commit, then rows and dead letters.
      flatten([for i, t in local.metric_tables : [
        {
          type   = "metric"
          x      = 0
          y      = 24 + i * 6
          width  = 12
          height = 6
          properties = {
            title  = "${t}: record age at commit (ms)"
            region = local.region
            period = 300
            view   = "timeSeries"
            metrics = [
              [local.emf_namespace, "NewestRecordAge", "Function", local.function_names["ingest"], "Table", t, { stat = "Maximum", label = "newest record" }],
              [local.emf_namespace, "RecordAgeP50", "Function", local.function_names["ingest"], "Table", t, { stat = "Average", label = "p50" }],
              [local.emf_namespace, "RecordAgeP99", "Function", local.function_names["ingest"], "Table", t, { stat = "Maximum", label = "p99" }],
              [local.emf_namespace, "RecordAgeMax", "Function", local.function_names["ingest"], "Table", t, { stat = "Maximum", label = "oldest record" }],
              [local.emf_namespace, "CommitLatency", "Function", local.function_names["ingest"], "Table", t, { stat = "p99", label = "commit latency p99" }],
            ]
            annotations = { horizontal = [{ label = "freshness alarm", value = var.alarm_freshness_threshold_ms }] }
          }
        },
        {
          type   = "metric"
          x      = 12
          y      = 24 + i * 6
          width  = 12
          height = 6
          properties = {
            title  = "${t}: rows and dead letters"
            region = local.region
            stat   = "Sum"
            period = 300
            view   = "timeSeries"
            metrics = [
              [local.emf_namespace, "Written", "Function", local.function_names["ingest"], "Table", t, { label = "rows" }],
              [local.emf_namespace, "DeadLettered", "Function", local.function_names["ingest"], "Table", t, { label = "dead letters", yAxis = "right" }],
            ]
          }
        },
      ]]),
      local.queued ? [{
        type   = "metric"
        x      = 0
        y      = 18
        width  = 24
        height = 6
        properties = {
          title  = "Commit queue"
          region = local.region
          stat   = "Maximum"
          period = 300
          view   = "timeSeries"
          metrics = [
            ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", aws_sqs_queue.commit[0].name, { label = "pending commit requests" }],
            ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", aws_sqs_queue.commit[0].name, { label = "oldest request (s)", yAxis = "right" }],
            ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", aws_sqs_queue.commit_dlq[0].name, { label = "commit DLQ" }],
            [local.emf_namespace, "MaxRecordAge", "Function", local.function_names["committer"], { label = "oldest record committed (ms)", yAxis = "right" }],
          ]
        }
      }] : []
    )
  })
}
