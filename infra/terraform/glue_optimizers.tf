################################################################################
# `glue_maintenance = "glue"`: the Glue Data Catalog's table optimizers compact,
# expire snapshots and delete orphan files of the maintained tables, running as
# the role below (permissions per AWS's documentation of Iceberg table
# optimizers). The maintenance function sets the optimizers up on each table it
# maintains (glue:Get/Create/UpdateTableOptimizer, passing this role to Glue)
# and skips those actions; its schedules stay as they are
# (docs/maintenance.md).
################################################################################

locals {
  glue_optimizers   = local.glue && var.glue_maintenance == "glue"
  optimizer_tables  = local.function_tables["maintenance"]
  optimizer_role    = one(aws_iam_role.glue_optimizer[*].arn)
  optimizer_prefix  = "${var.warehouse_prefix}/${var.namespace}.db"
  optimizer_log_arn = "arn:${local.partition}:logs:${local.region}:${local.account}:log-group:/aws-glue"

  optimizer_policy = {
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "ReadWriteDeleteTableFiles", Effect = "Allow", Action = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
        Resource = [for t in local.optimizer_tables : "${local.s3_warehouse_arn}/${t}/*"]
      },
      # Orphan file deletion lists each table's location.
      {
        Sid       = "ListTableLocations", Effect = "Allow", Action = ["s3:ListBucket"], Resource = [local.warehouse_bucket]
        Condition = { StringLike = { "s3:prefix" = flatten([for t in local.optimizer_tables : ["${local.optimizer_prefix}/${t}", "${local.optimizer_prefix}/${t}/*"]]) } }
      },
      {
        Sid      = "ReadAndCommitTables", Effect = "Allow", Action = ["glue:GetDatabase", "glue:GetTable", "glue:UpdateTable"],
        Resource = concat([local.glue_catalog_arn, local.glue_database_arn], [for t in local.optimizer_tables : "${local.glue_table_arn}/${t}"])
      },
      # The warehouse is encrypted with the deployment key.
      { Sid = "UseDeploymentKey", Effect = "Allow", Action = ["kms:Decrypt", "kms:GenerateDataKey"], Resource = [local.kms_key_arn] },
      {
        Sid      = "WriteOptimizerLogs", Effect = "Allow", Action = ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
        Resource = [for kind in ["compaction", "retention", "orphan-file-deletion"] : "${local.optimizer_log_arn}/iceberg-${kind}/logs:*"]
      },
    ]
  }
}

resource "aws_iam_role" "glue_optimizer" {
  count = local.glue_optimizers ? 1 : 0

  name_prefix = "${var.name}-glue-optimizer-"
  description = "icestream: the Glue Data Catalog's table optimizers (compaction, retention, orphan_file_deletion) of ${var.namespace}"
  assume_role_policy = jsonencode({
    Version   = "2012-10-17"
    Statement = [{ Sid = "GlueAssume", Effect = "Allow", Principal = { Service = "glue.amazonaws.com" }, Action = "sts:AssumeRole" }]
  })
  permissions_boundary = local.permissions_boundary
  tags                 = local.tags
}

resource "aws_iam_role_policy" "glue_optimizer" {
  count = local.glue_optimizers ? 1 : 0

  name   = "icestream-glue-optimizer"
  role   = aws_iam_role.glue_optimizer[0].id
  policy = jsonencode(local.optimizer_policy)
}

# Lake Formation governs the catalog: the optimizers rewrite and commit the namespace's tables.
resource "aws_lakeformation_permissions" "glue_optimizer_tables" {
  count = local.glue_optimizers && local.lake_formation ? 1 : 0

  principal   = aws_iam_role.glue_optimizer[0].arn
  permissions = ["ALTER", "DESCRIBE", "INSERT", "DELETE"]

  table {
    database_name = aws_glue_catalog_database.this[0].name
    wildcard      = true
  }
}
