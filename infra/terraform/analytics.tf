################################################################################
# Querying the tables right after apply:
#   * Lake Formation permissions, when the account governs the Glue catalog with
#     it (`lake_formation`): the function roles may create and commit tables of
#     the namespace, `lake_formation.readers` may read them. Table permissions
#     use the database's table wildcard: the functions create the tables on
#     first use, and Lake Formation cannot grant on a table that does not exist
#     yet (IAM still scopes each function to its own tables).
#   * S3 Tables: with `s3tables_analytics_integration` (off by default: it is
#     account-wide), the table buckets of the account registered with Lake
#     Formation (federated) through a role of the module; the `s3tablescatalog`
#     Glue catalog needs one CLI call (no resource in hashicorp/aws 5.x),
#     printed by `s3tables_analytics_catalog_command`; `lake_formation.readers`
#     get SELECT on the namespace's tables in `s3tablescatalog/<bucket>` by the
#     CLI calls of `s3tables_reader_grant_commands`.
#   * An Athena workgroup (engine v3) with a KMS-encrypted results bucket.
#   * `reader_policy_json`: a read-only IAM policy for people and tools.
################################################################################

locals {
  lake_formation       = var.lake_formation != null && local.glue
  s3tables_integration = var.s3tables_analytics_integration && !local.glue
  # Lake Formation registers every table bucket of the account and region at once.
  s3tables_all_buckets_arn = "arn:${local.partition}:s3tables:${local.region}:${local.account}:bucket/*"
  s3tables_catalog_input = jsonencode({
    FederatedCatalog                 = { Identifier = local.s3tables_all_buckets_arn, ConnectionName = "aws:s3tables" }
    CreateDatabaseDefaultPermissions = []
    CreateTableDefaultPermissions    = []
    AllowFullTableExternalDataAccess = "True"
  })
  s3tables_catalog_command = "aws glue create-catalog --region ${local.region} --name s3tablescatalog --catalog-input '${local.s3tables_catalog_input}'"
}

resource "aws_lakeformation_permissions" "function_database" {
  for_each = local.lake_formation ? aws_iam_role.function : {}

  principal   = each.value.arn
  permissions = ["DESCRIBE", "CREATE_TABLE"]

  database {
    name = aws_glue_catalog_database.this[0].name
  }
}

resource "aws_lakeformation_permissions" "function_tables" {
  for_each = local.lake_formation ? aws_iam_role.function : {}

  principal   = each.value.arn
  permissions = ["ALL"]

  table {
    database_name = aws_glue_catalog_database.this[0].name
    wildcard      = true
  }
}

resource "aws_lakeformation_permissions" "reader_tables" {
  for_each = local.lake_formation ? toset(var.lake_formation.readers) : toset([])

  principal   = each.value
  permissions = ["SELECT", "DESCRIBE"]

  table {
    database_name = aws_glue_catalog_database.this[0].name
    wildcard      = true
  }
}

data "aws_iam_policy_document" "s3tables_lakeformation_assume" {
  count = local.s3tables_integration ? 1 : 0

  statement {
    actions = ["sts:AssumeRole", "sts:SetSourceIdentity", "sts:SetContext"]

    principals {
      type        = "Service"
      identifiers = ["lakeformation.amazonaws.com"]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
    }
  }
}

resource "aws_iam_role" "s3tables_lakeformation" {
  count = local.s3tables_integration ? 1 : 0

  name_prefix          = "${var.name}-s3tables-lf-"
  description          = "Lake Formation: vends credentials for the account's S3 table buckets to AWS analytics services"
  assume_role_policy   = data.aws_iam_policy_document.s3tables_lakeformation_assume[0].json
  permissions_boundary = local.permissions_boundary
  tags                 = local.tags
}

resource "aws_iam_role_policy" "s3tables_lakeformation" {
  count = local.s3tables_integration ? 1 : 0

  name = "s3tables-data-access"
  role = aws_iam_role.s3tables_lakeformation[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      # ListTableBuckets has no resource type: it is authorised on "*" only.
      { Sid = "ListTableBuckets", Effect = "Allow", Action = ["s3tables:ListTableBuckets"], Resource = ["*"] },
      {
        Sid    = "TableBucketsOfTheAccount"
        Effect = "Allow"
        Action = ["s3tables:GetTableBucket", "s3tables:GetNamespace", "s3tables:ListNamespaces",
          "s3tables:ListTables", "s3tables:GetTable", "s3tables:GetTableMetadataLocation", "s3tables:UpdateTableMetadataLocation",
        "s3tables:GetTableData", "s3tables:PutTableData", "s3tables:CreateTable", "s3tables:CreateNamespace"]
        Resource = [local.s3tables_all_buckets_arn, "${local.s3tables_all_buckets_arn}/table/*"]
      },
      { Sid = "DeploymentKey", Effect = "Allow", Action = ["kms:Decrypt", "kms:GenerateDataKey"], Resource = [local.kms_key_arn] },
    ]
  })
}

resource "aws_lakeformation_resource" "s3tables" {
  count = local.s3tables_integration ? 1 : 0

  arn             = local.s3tables_all_buckets_arn
  role_arn        = aws_iam_role.s3tables_lakeformation[0].arn
  with_federation = true
}

# Readers of the S3 tables through the analytics integration: the federated catalog
# `<account>:s3tablescatalog/<bucket>` holds each namespace as a database. hashicorp/aws 5.x
# takes only an account id as a Lake Formation catalog id, so the grant is a CLI call per reader
# (output `s3tables_reader_grant_commands`; README, "After the first apply").
locals {
  s3tables_readers    = var.lake_formation != null && !local.glue ? var.lake_formation.readers : []
  s3tables_catalog_id = local.glue ? null : "${local.account}:s3tablescatalog/${local.table_bucket_name}"
  s3tables_reader_grant_commands = [for r in local.s3tables_readers : join(" ", [
    "aws lakeformation grant-permissions --region ${local.region}",
    "--principal DataLakePrincipalIdentifier=${r} --permissions SELECT DESCRIBE",
    "--resource '${jsonencode({ Table = { CatalogId = local.s3tables_catalog_id, DatabaseName = var.namespace, TableWildcard = {} } })}'",
  ])]
}

resource "aws_athena_workgroup" "this" {
  count = var.create_athena_workgroup ? 1 : 0

  name          = var.name
  description   = "icestream: queries over the ${var.namespace} tables"
  force_destroy = var.force_destroy

  configuration {
    enforce_workgroup_configuration    = true
    publish_cloudwatch_metrics_enabled = true

    engine_version {
      selected_engine_version = "Athena engine version 3"
    }

    result_configuration {
      output_location = "s3://${aws_s3_bucket.this["athena"].id}/results/"

      encryption_configuration {
        encryption_option = "SSE_KMS"
        kms_key_arn       = local.kms_key_arn
      }
    }
  }

  tags = local.tags
}

locals {
  reader_statements = concat(
    local.glue ? [
      {
        Sid      = "CatalogRead"
        Action   = ["glue:GetDatabase", "glue:GetDatabases", "glue:GetTable", "glue:GetTables", "glue:GetPartitions"]
        Resource = [local.glue_catalog_arn, local.glue_database_arn, "${local.glue_table_arn}/*"]
      },
      { Sid = "WarehouseList", Action = ["s3:ListBucket"], Resource = [local.warehouse_bucket] },
      { Sid = "WarehouseRead", Action = ["s3:GetObject"], Resource = ["${local.s3_warehouse_arn}/*"] },
      ] : [
      {
        Sid      = "TableBucketRead"
        Action   = ["s3tables:GetTableBucket", "s3tables:GetNamespace", "s3tables:ListNamespaces", "s3tables:ListTables"]
        Resource = [local.table_bucket]
      },
      {
        Sid      = "TablesRead"
        Action   = ["s3tables:GetTable", "s3tables:GetTableMetadataLocation", "s3tables:GetTableData"]
        Resource = ["${local.table_bucket}/table/*"]
      },
      {
        Sid      = "FederatedCatalogRead"
        Action   = ["glue:GetCatalog", "glue:GetDatabase", "glue:GetDatabases", "glue:GetTable", "glue:GetTables"]
        Resource = ["arn:${local.partition}:glue:${local.region}:${local.account}:*"]
      },
    ],
    [
      { Sid = "DecryptTables", Action = ["kms:Decrypt"], Resource = [local.kms_key_arn] },
      # Lake Formation vends the data credentials when it governs the tables.
      { Sid = "LakeFormationCredentials", Action = ["lakeformation:GetDataAccess"], Resource = ["*"] },
    ],
    var.create_athena_workgroup ? [
      {
        Sid = "AthenaWorkgroup"
        Action = ["athena:StartQueryExecution", "athena:GetQueryExecution", "athena:GetQueryResults", "athena:StopQueryExecution",
        "athena:GetWorkGroup", "athena:ListQueryExecutions"]
        Resource = [aws_athena_workgroup.this[0].arn]
      },
      {
        Sid      = "AthenaResults"
        Action   = ["s3:GetObject", "s3:PutObject", "s3:ListBucket", "s3:GetBucketLocation", "s3:AbortMultipartUpload"]
        Resource = [aws_s3_bucket.this["athena"].arn, "${aws_s3_bucket.this["athena"].arn}/*"]
      },
      { Sid = "AthenaResultsKey", Action = ["kms:GenerateDataKey"], Resource = [local.kms_key_arn] },
    ] : []
  )
}
