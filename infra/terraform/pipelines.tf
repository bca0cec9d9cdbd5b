################################################################################
# The pipeline file (issue 14): which tables ingest writes and which topics feed
# them. Terraform cannot parse TOML, so the module reads this documented subset
# of the file with regular expressions:
#   * an optional top-level `namespace = "..."` line before the first block;
#   * per `[[pipeline]]` block, one `table = "..."` line and one
#     `topics = ["...", ...]` line (on one line or spread over several), the
#     schema-registry lines `registry`, `registry_name` and `registry_secret`
#     (each one `key = "..."` line), which decide what ingest's role may read,
#     and `mode = "upsert"` / `changelog = true`, which add `<table>_changelog`
#     and the tombstone purge.
# Which tables a file implies is the code's decision (`icestream pipelines tables
# FILE` lists them); Terraform cannot run the binary
# offline (no external provider in a plan that must work without AWS or a
# build), so tests/infra/test_pipelines.py holds this derivation to the
# code's list for every pipeline file shipped or used in the tests.
# `topic_pattern` blocks cannot be deployed (a mapping needs exact topic names).
# A `table` with `{topic}` (a table per topic) names one table per listed topic:
# the topic lowercased, every character outside [a-z0-9_] as `_`
# (pipeline/template.rs); the grants below name those tables.
# tests/infra/test_pipelines.py checks, for every shipped pipeline file, that
# what this file derives equals what a TOML parser reads.
#
# The file and every file beside it (schemas, relative paths; not hidden files
# or Terraform's own) are uploaded to S3, and ingest gets
# ICESTREAM_PIPELINES = s3://<bucket>/<prefix>/<file name>.
#
# Without a pipeline file the module keeps the single telemetry pipeline of
# `table`, `source_format`, `dedup` and `ingest_topics`.
################################################################################

locals {
  pipeline_file = var.pipeline_file
  pipeline_dir  = local.pipeline_file == null ? null : dirname(local.pipeline_file)
  # Comments out first: a `#` never occurs in table or topic names.
  pipeline_text   = local.pipeline_file == null ? "" : replace(file(local.pipeline_file), "/#[^\\n]*/", "")
  pipeline_chunks = split("[[pipeline]]", local.pipeline_text)
  pipeline_blocks = local.pipeline_file == null ? [] : slice(local.pipeline_chunks, 1, length(local.pipeline_chunks))

  pipelines = [for b in local.pipeline_blocks : {
    table    = try(regex("(?m)^[ \\t]*table[ \\t]*=[ \\t]*\"([^\"]+)\"", b)[0], null)
    topics   = [for t in regexall("\"([^\"]+)\"", try(regex("(?s)(?:^|\\n)[ \\t]*topics[ \\t]*=[ \\t]*\\[([^\\]]*)\\]", b)[0], "")) : t[0]]
    registry = try(regex("(?m)^[ \\t]*registry[ \\t]*=[ \\t]*\"([^\"]+)\"", b)[0], null)
    # The code's default registry name (pipeline/mod.rs).
    registry_name   = try(regex("(?m)^[ \\t]*registry_name[ \\t]*=[ \\t]*\"([^\"]+)\"", b)[0], "default-registry")
    registry_secret = try(regex("(?m)^[ \\t]*registry_secret[ \\t]*=[ \\t]*\"([^\"]+)\"", b)[0], null)
    upsert          = try(regex("(?m)^[ \\t]*mode[ \\t]*=[ \\t]*\"([^\"]+)\"", b)[0], "append") == "upsert"
    changelog       = try(regex("(?m)^[ \\t]*changelog[ \\t]*=[ \\t]*(true|false)\\b", b)[0], "false") == "true"
  }]
  # Each block's tables: its `table`, or one per topic for a table per topic.
  pipeline_block_tables = [for p in local.pipelines : (
    strcontains(coalesce(p.table, ""), "{topic}")
    ? [for t in p.topics : replace(p.table, "{topic}", replace(lower(t), "/[^a-z0-9_]/", "_"))]
    : [p.table]
  )]
  pipeline_namespace = local.pipeline_file == null ? var.namespace : try(
    regex("(?m)^[ \\t]*namespace[ \\t]*=[ \\t]*\"([^\"]+)\"", local.pipeline_chunks[0])[0], "bigdata"
  )

  # What the rest of the module consumes.
  ingest_table_names = local.pipeline_file == null ? [var.table] : distinct(flatten(local.pipeline_block_tables))
  # Every table ingest writes: each pipeline's table, `<table>_dead_letter`, and an upsert
  # pipeline's `<table>_changelog` when it keeps one (pipeline/mod.rs, PipelineSet::tables).
  pipeline_tables = local.pipeline_file == null ? [var.table, "${var.table}_dead_letter"] : distinct(flatten([
    for i, p in local.pipelines : [
      for t in local.pipeline_block_tables[i] : concat([t, "${t}_dead_letter"], p.upsert && p.changelog ? ["${t}_changelog"] : [])
    ]
  ]))
  # Upsert tables keep tombstones (purge-tombstones runs on each).
  upsert_table_names = flatten([for i, p in local.pipelines : local.pipeline_block_tables[i] if p.upsert])
  ingest_topics      = local.pipeline_file == null ? var.ingest_topics : distinct(flatten([for p in local.pipelines : p.topics]))

  # Schema registries ingest reads (iam.tf grants exactly these).
  glue_registry_names = distinct([for p in local.pipelines : p.registry_name if p.registry == "glue"])
  registry_secrets    = distinct([for p in local.pipelines : p.registry_secret if p.registry == "confluent" && p.registry_secret != null])

  # Upload: everything beside the file except hidden entries and Terraform's files.
  pipeline_files = local.pipeline_file == null ? [] : sort([
    for f in fileset(local.pipeline_dir, "**") : f
    if !startswith(f, ".") && !strcontains(f, "/.") && length(regexall("\\.(tf|tfvars|tfstate|tfplan|hcl)(\\.|$)", f)) == 0
  ])
  pipeline_digest = local.pipeline_file == null ? null : substr(sha256(join("\n", [
    for f in local.pipeline_files : "${f} ${filesha256("${local.pipeline_dir}/${f}")}"
  ])), 0, 16)
  pipeline_bucket = local.pipeline_file == null ? null : (local.glue ? local.warehouse_bucket_name : aws_s3_bucket.this["config"].id)
  pipeline_prefix = "${var.pipeline_prefix}/${var.name}"
  pipelines_uri   = local.pipeline_file == null ? "" : "s3://${local.pipeline_bucket}/${local.pipeline_prefix}/${basename(local.pipeline_file)}"
  pipeline_object_arn_prefix = local.pipeline_file == null ? null : (
    "arn:${local.partition}:s3:::${local.pipeline_bucket}/${local.pipeline_prefix}"
  )
}

resource "aws_s3_object" "pipeline" {
  for_each = toset(local.pipeline_files)

  bucket = local.pipeline_bucket
  key    = "${local.pipeline_prefix}/${each.value}"
  source = "${local.pipeline_dir}/${each.value}"
  # Not `etag`: under SSE-KMS (the buckets' default) S3's ETag is no MD5 of the content.
  source_hash = filemd5("${local.pipeline_dir}/${each.value}")

  server_side_encryption = "aws:kms"
  kms_key_id             = local.kms_key_arn
  tags                   = local.tags

  lifecycle {
    precondition {
      condition     = length(local.pipelines) > 0 && alltrue([for p in local.pipelines : p.table != null && length(p.topics) > 0])
      error_message = "pipeline_file: every [[pipeline]] block needs a `table = \"...\"` line and a `topics = [...]` list of exact topic names (topic_pattern cannot be deployed: a Kafka mapping needs exact names)."
    }

    precondition {
      condition     = local.pipeline_namespace == var.namespace
      error_message = "pipeline_file sets namespace \"${local.pipeline_namespace}\" but the module's namespace is \"${var.namespace}\"; make them equal."
    }
  }
}
