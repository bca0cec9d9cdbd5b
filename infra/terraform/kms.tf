################################################################################
# One customer managed key for the deployment: warehouse and failure buckets,
# the S3 table bucket, log groups, queues, the alarm topic, MSK at rest and the
# functions' environment. Roles get kms:Decrypt/GenerateDataKey through their
# own policies (iam.tf); this key policy lets IAM decide for the account and
# admits the AWS services that encrypt on the deployment's behalf.
################################################################################

locals {
  create_kms_key = var.kms_key_arn == null
  kms_key_arn    = local.create_kms_key ? aws_kms_key.this[0].arn : var.kms_key_arn
}

data "aws_iam_policy_document" "kms" {
  #checkov:skip=CKV_AWS_109:Key policy: the account root must be able to manage the key (lock-out protection); resources "*" in a key policy means this key only.
  #checkov:skip=CKV_AWS_111:Key policy: resources "*" in a key policy means this key only; write access is granted to the account so IAM policies decide.
  #checkov:skip=CKV_AWS_356:Key policy: resources "*" in a key policy means this key only.

  # Key policy: resources "*" means this key. Actions are listed one by one.
  statement {
    sid = "AccountAdministersAndDelegatesToIAM"
    actions = [
      "kms:CancelKeyDeletion", "kms:CreateAlias", "kms:CreateGrant", "kms:Decrypt",
      "kms:DeleteAlias", "kms:DescribeKey", "kms:DisableKey", "kms:DisableKeyRotation",
      "kms:EnableKey", "kms:EnableKeyRotation", "kms:Encrypt", "kms:GenerateDataKey",
      "kms:GenerateDataKeyWithoutPlaintext", "kms:GetKeyPolicy", "kms:GetKeyRotationStatus",
      "kms:ListAliases", "kms:ListGrants", "kms:ListKeyPolicies", "kms:ListKeyRotations",
      "kms:ListResourceTags", "kms:PutKeyPolicy", "kms:ReEncryptFrom", "kms:ReEncryptTo",
      "kms:RetireGrant", "kms:RevokeGrant", "kms:RotateKeyOnDemand", "kms:ScheduleKeyDeletion",
      "kms:TagResource", "kms:UntagResource", "kms:UpdateAlias", "kms:UpdateKeyDescription",
    ]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account}:root"]
    }
  }

  statement {
    sid = "CloudWatchLogsEncryptsDeploymentLogGroups"
    actions = [
      "kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:ReEncryptTo",
      "kms:GenerateDataKey", "kms:GenerateDataKeyWithoutPlaintext", "kms:DescribeKey",
    ]
    resources = ["*"]

    principals {
      type        = "Service"
      identifiers = ["logs.${local.region}.amazonaws.com"]
    }

    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values = [
        "arn:${local.partition}:logs:${local.region}:${local.account}:log-group:/aws/lambda/${var.name}-*",
        "arn:${local.partition}:logs:${local.region}:${local.account}:log-group:/aws/msk/${var.name}",
      ]
    }
  }

  dynamic "statement" {
    for_each = var.create_sns_topic && var.alarm_sns_topic_arn == null ? [1] : []

    content {
      sid       = "CloudWatchAlarmsPublishToEncryptedTopic"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = ["*"]

      principals {
        type        = "Service"
        identifiers = ["cloudwatch.amazonaws.com"]
      }

      condition {
        test     = "StringEquals"
        variable = "aws:SourceAccount"
        values   = [local.account]
      }
    }
  }

  dynamic "statement" {
    for_each = local.glue ? [] : [1]

    content {
      sid       = "S3TablesMaintenanceReadsAndWritesTableData"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = ["*"]

      principals {
        type        = "Service"
        identifiers = ["maintenance.s3tables.amazonaws.com"]
      }

      condition {
        test     = "StringLike"
        variable = "kms:EncryptionContext:aws:s3:arn"
        values   = ["${coalesce(var.table_bucket_arn, "arn:${local.partition}:s3tables:${local.region}:${local.account}:bucket/${var.name}-tables")}/*"]
      }

      condition {
        test     = "StringEquals"
        variable = "aws:SourceAccount"
        values   = [local.account]
      }
    }
  }
}

# Bring your own key with `kms_key_arn`: its key policy must then admit what the statements
# above admit (CloudWatch Logs for the log groups, CloudWatch for the alarm topic, S3 Tables
# maintenance), and IAM must be able to grant the function roles kms:Decrypt/GenerateDataKey.
resource "aws_kms_key" "this" {
  count = local.create_kms_key ? 1 : 0

  description             = "icestream ${var.name}: table storage, logs, queues, MSK"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_deletion_window_in_days
  policy                  = data.aws_iam_policy_document.kms.json
  tags                    = local.tags
}

resource "aws_kms_alias" "this" {
  count = local.create_kms_key ? 1 : 0

  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.this[0].key_id
}
