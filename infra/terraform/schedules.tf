################################################################################
# Maintenance schedules: EventBridge Scheduler, one schedule per action and
# table, each invoking the maintenance function with
#   {"action":"<action>","table":"<table>"}
# through a role that may only invoke the maintenance function. A schedule
# whose invocation fails (e.g. the role cannot be assumed) goes to a dead-letter
# queue, which is alarmed.
################################################################################

locals {
  tombstone_tables = local.upsert_table_names
  maintenance_jobs = merge([
    for action, expression in var.maintenance_schedules : {
      # Tombstones exist only in upsert tables (the pipelines'); the audit
      # needs a table with a dead-letter table (the ingest pipeline tables).
      for table in local.maintenance_tables : "${action}-${table}" => {
        action     = action
        table      = table
        expression = expression
        # Schedule names hold at most 64 characters: a long key keeps a readable head and a
        # digest of the whole key, so two long table names never share a name.
        schedule_name = length("${action}-${table}") <= 64 ? "${action}-${table}" : "${substr("${action}-${table}", 0, 47)}-${substr(sha256("${action}-${table}"), 0, 16)}"
      } if !(action == "purge-tombstones" && !contains(local.tombstone_tables, table)) && !(action == "audit" && !contains(local.ingest_table_names, table))
    }
  ]...)
  schedule_group_arn = "arn:${local.partition}:scheduler:${local.region}:${local.account}:schedule-group/${var.name}"
}

resource "aws_scheduler_schedule_group" "maintenance" {
  name = var.name
  tags = local.tags
}

resource "aws_scheduler_schedule" "maintenance" {
  for_each = local.maintenance_jobs

  #checkov:skip=CKV_AWS_297:The payload is a non-secret {"action","table"} pair; a customer managed key would force kms:Decrypt onto the scheduler role, which should only be able to invoke the maintenance function.

  name        = each.value.schedule_name
  group_name  = aws_scheduler_schedule_group.maintenance.name
  description = "icestream maintenance: ${each.value.action} ${var.namespace}.${each.value.table}"

  schedule_expression          = each.value.expression
  schedule_expression_timezone = var.maintenance_schedule_timezone

  flexible_time_window {
    mode                      = var.maintenance_flexible_window_minutes > 0 ? "FLEXIBLE" : "OFF"
    maximum_window_in_minutes = var.maintenance_flexible_window_minutes > 0 ? var.maintenance_flexible_window_minutes : null
  }

  target {
    arn      = aws_lambda_function.this["maintenance"].arn
    role_arn = aws_iam_role.scheduler.arn
    input    = jsonencode({ action = each.value.action, table = each.value.table })

    # A missed run is repeated by the next schedule; never pile runs up.
    retry_policy {
      maximum_retry_attempts       = 0
      maximum_event_age_in_seconds = 3600
    }

    dead_letter_config {
      arn = aws_sqs_queue.schedule_dlq.arn
    }
  }
}

# Invocations Scheduler could not make (denied, function missing, throttled past the event age).
resource "aws_sqs_queue" "schedule_dlq" {
  name                              = "${var.name}-maintenance-schedule-dlq"
  message_retention_seconds         = 1209600
  kms_master_key_id                 = local.kms_key_arn
  kms_data_key_reuse_period_seconds = 300
  tags                              = local.tags
}

# Plain JSON (not a policy document data source) so a plan shows it: tests/schedules.tftest.hcl
# asserts the condition. Scheduler presents the schedule group's ARN as aws:SourceArn.
locals {
  scheduler_trust_policy = {
    Version = "2012-10-17"
    Statement = [{
      Sid       = "SchedulerAssume"
      Effect    = "Allow"
      Action    = "sts:AssumeRole"
      Principal = { Service = "scheduler.amazonaws.com" }
      Condition = {
        StringEquals = { "aws:SourceAccount" = local.account }
        ArnEquals    = { "aws:SourceArn" = local.schedule_group_arn }
      }
    }]
  }
}

data "aws_iam_policy_document" "scheduler" {
  statement {
    sid     = "InvokeMaintenanceOnly"
    actions = ["lambda:InvokeFunction"]
    resources = [
      aws_lambda_function.this["maintenance"].arn,
      "${aws_lambda_function.this["maintenance"].arn}:*",
    ]
  }

  statement {
    sid       = "DeadLetterFailedInvocations"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.schedule_dlq.arn]
  }

  statement {
    sid       = "EncryptDeadLetters"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [local.kms_key_arn]
  }
}

resource "aws_iam_role" "scheduler" {
  name_prefix          = "${var.name}-scheduler-"
  description          = "EventBridge Scheduler: invokes the icestream maintenance function"
  assume_role_policy   = jsonencode(local.scheduler_trust_policy)
  permissions_boundary = local.permissions_boundary
  tags                 = local.tags
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "invoke-maintenance"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}
