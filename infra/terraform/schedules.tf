################################################################################
# Maintenance schedules: EventBridge Scheduler, one schedule per action and
# table, each invoking the maintenance function with
#   {"action":"<action>","table":"<table>"}
# through a role that may only invoke the maintenance function.
################################################################################

locals {
  maintenance_jobs = merge([
    for action, expression in var.maintenance_schedules : {
      # Tombstones exist only in the CDC mirror.
      for table in local.maintenance_tables : "${action}-${table}" => {
        action     = action
        table      = table
        expression = expression
      } if action != "purge-tombstones" || table == var.mirror_table
    }
  ]...)
}

resource "aws_scheduler_schedule_group" "maintenance" {
  name = var.name
  tags = local.tags
}

resource "aws_scheduler_schedule" "maintenance" {
  for_each = local.maintenance_jobs

  #checkov:skip=CKV_AWS_297:The payload is a non-secret {"action","table"} pair; a customer managed key would force kms:Decrypt onto the scheduler role, which should only be able to invoke the maintenance function.

  name        = substr(each.key, 0, 64)
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
  }
}

data "aws_iam_policy_document" "scheduler_assume" {
  statement {
    sid     = "SchedulerAssume"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = ["arn:${local.partition}:scheduler:${local.region}:${local.account}:schedule/${var.name}/*"]
    }
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
}

resource "aws_iam_role" "scheduler" {
  name_prefix        = "${var.name}-scheduler-"
  description        = "EventBridge Scheduler: invokes the icestream maintenance function"
  assume_role_policy = data.aws_iam_policy_document.scheduler_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "scheduler" {
  name   = "invoke-maintenance"
  role   = aws_iam_role.scheduler.id
  policy = data.aws_iam_policy_document.scheduler.json
}
