# The module's main setups planned (and applied) against a mock AWS provider: no account, no
# network. tests/infra/test_contract.py also reads these runs' states to check IAM, knobs and
# metrics against `icestream contract`.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  artifacts_dir = "tests/fixtures/lambda"
  vpc_id        = "vpc-0123456789abcdef0"
  subnet_ids    = ["subnet-a", "subnet-b"]
}

run "defaults" {
  command = apply

  assert {
    condition     = length(distinct([for s in aws_scheduler_schedule.maintenance : s.name])) == length(aws_scheduler_schedule.maintenance)
    error_message = "Two maintenance schedules share a name."
  }

  assert {
    condition     = alltrue([for s in aws_scheduler_schedule.maintenance : length(s.name) <= 64])
    error_message = "A schedule name is longer than 64 characters."
  }

  assert {
    condition = (
      jsondecode(aws_iam_role.scheduler.assume_role_policy).Statement[0].Condition.ArnEquals["aws:SourceArn"] ==
      "arn:aws:scheduler:eu-west-1:123456789012:schedule-group/${aws_scheduler_schedule_group.maintenance.name}"
    )
    error_message = "The scheduler role must trust the schedule group's ARN (what Scheduler presents as aws:SourceArn)."
  }

  assert {
    condition     = alltrue([for s in aws_scheduler_schedule.maintenance : s.target[0].dead_letter_config[0].arn == aws_sqs_queue.schedule_dlq.arn])
    error_message = "Every schedule needs the dead-letter queue."
  }

  assert {
    condition     = aws_lambda_function.this["maintenance"].environment[0].variables["ICESTREAM_TOMBSTONE_RETENTION_DAYS"] == "7" && !contains(keys(aws_lambda_function.this["ingest"].environment[0].variables), "ICESTREAM_TOMBSTONE_RETENTION_DAYS")
    error_message = "tombstone_retention_days belongs to maintenance (purge-tombstones), not ingest."
  }

  assert {
    condition     = alltrue([for f in aws_lambda_function.this : f.reserved_concurrent_executions == -1 || f.reserved_concurrent_executions == null])
    error_message = "No function reserves concurrency by default."
  }

  assert {
    condition     = alltrue([for f in aws_lambda_function.this : f.logging_config[0].application_log_level == "TRACE"])
    error_message = "Lambda's log filter must not drop the EMF lines (no level = INFO)."
  }

  assert {
    condition     = toset([for r in aws_vpc_security_group_egress_rule.msk_https : r.cidr_ipv4]) == toset(["0.0.0.0/0"])
    error_message = "The pollers' security group must reach STS, Lambda and S3 on 443 through NAT or endpoints."
  }

  assert {
    condition     = aws_athena_workgroup.this[0].configuration[0].result_configuration[0].output_location == "s3://${aws_s3_bucket.this["athena"].id}/results/"
    error_message = "The Athena workgroup writes results to the module's results bucket."
  }

  assert {
    condition     = contains(jsondecode(output.reader_policy_json).Statement[*].Sid, "WarehouseRead")
    error_message = "The reader policy reads the warehouse."
  }
}

run "long_table_names" {
  command = plan

  variables {
    maintenance_tables = ["a_very_long_table_name_that_fills_the_schedule_name_limit_one", "a_very_long_table_name_that_fills_the_schedule_name_limit_two"]
  }

  assert {
    condition     = length(distinct([for s in aws_scheduler_schedule.maintenance : s.name])) == length(aws_scheduler_schedule.maintenance)
    error_message = "Long table names must not collide in schedule names."
  }

  assert {
    condition     = alltrue([for s in aws_scheduler_schedule.maintenance : length(s.name) <= 64])
    error_message = "A schedule name is longer than 64 characters."
  }
}

run "queued" {
  command = apply

  variables {
    commit_mode = "queued"
  }

  # A queue ARN of its own, so a grant on the wrong queue shows.
  override_resource {
    target = aws_sqs_queue.commit
    values = {
      arn = "arn:aws:sqs:eu-west-1:123456789012:icestream-commit.fifo"
      url = "https://sqs.eu-west-1.amazonaws.com/123456789012/icestream-commit.fifo"
    }
  }

  override_resource {
    target = aws_sqs_queue.commit_dlq
    values = {
      arn = "arn:aws:sqs:eu-west-1:123456789012:icestream-commit-dlq.fifo"
      url = "https://sqs.eu-west-1.amazonaws.com/123456789012/icestream-commit-dlq.fifo"
    }
  }

  assert {
    condition     = aws_sqs_queue.commit[0].fifo_queue && endswith(aws_sqs_queue.commit[0].name, ".fifo") && aws_sqs_queue.commit_dlq[0].fifo_queue
    error_message = "Commit requests go through a FIFO queue (table = message group) and a FIFO DLQ."
  }

  assert {
    condition     = aws_sqs_queue.commit_dlq[0].message_retention_seconds == 1209600 && aws_sqs_queue.commit_dlq[0].message_retention_seconds > aws_sqs_queue.commit[0].message_retention_seconds
    error_message = "The commit DLQ keeps messages longer than the queue (SQS keeps the original enqueue time)."
  }

  assert {
    condition     = aws_lambda_event_source_mapping.committer[0].scaling_config[0].maximum_concurrency == 5 && aws_lambda_event_source_mapping.committer[0].batch_size <= 10
    error_message = "The committer mapping caps concurrency itself (no throttling) and takes FIFO batches."
  }

  assert {
    condition     = contains(keys(aws_cloudwatch_metric_alarm.queue), "commit-queue-age")
    error_message = "The commit queue's age is alarmed."
  }

  assert {
    condition     = contains(keys(aws_cloudwatch_metric_alarm.queue), "commit-dlq") && aws_cloudwatch_metric_alarm.queue["commit-dlq"].dimensions["QueueName"] == aws_sqs_queue.commit_dlq[0].name && aws_cloudwatch_metric_alarm.queue["commit-dlq"].threshold == 0
    error_message = "A commit request in the DLQ is alarmed at once (its table must not commit past it)."
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.committer_freshness[0].metric_name == "MaxRecordAge" &&
      aws_cloudwatch_metric_alarm.committer_freshness[0].dimensions["Function"] == aws_lambda_function.this["committer"].function_name &&
      aws_cloudwatch_metric_alarm.committer_freshness[0].threshold == 900000 &&
      length([for k, a in aws_cloudwatch_metric_alarm.table : k if endswith(k, "-freshness")]) == 0
    )
    error_message = "Queued: freshness is alarmed on the committer's record age (queued appends report none per table)."
  }
}

run "per_table_freshness_and_dead_letter_alarms" {
  command = plan

  variables {
    pipeline_file                = "tests/fixtures/pipelines/pipelines.toml"
    alarm_freshness_threshold_ms = 120000
  }

  assert {
    condition = alltrue([for t in local.ingest_table_names : (
      aws_cloudwatch_metric_alarm.table["${t}-freshness"].metric_name == "NewestRecordAge" &&
      aws_cloudwatch_metric_alarm.table["${t}-freshness"].threshold == 120000 &&
      aws_cloudwatch_metric_alarm.table["${t}-freshness"].dimensions["Table"] == t &&
      aws_cloudwatch_metric_alarm.table["${t}-dead-lettered"].metric_name == "DeadLettered"
    )]) && length(aws_cloudwatch_metric_alarm.table) == 2 * length(local.ingest_table_names)
    error_message = "Every pipeline table has a freshness alarm at the threshold variable and a dead-letter alarm."
  }

  assert {
    condition     = length([for w in jsondecode(aws_cloudwatch_dashboard.this[0].dashboard_body).widgets : w if endswith(w.properties.title, "record age at commit (ms)")]) == length(local.ingest_table_names)
    error_message = "The dashboard shows each pipeline table's freshness."
  }
}

run "scheduled_audit_of_each_pipeline_table" {
  command = plan

  variables {
    pipeline_file         = "tests/fixtures/pipelines/pipelines.toml"
    maintenance_schedules = { audit = "rate(1 day)" }
  }

  assert {
    condition = length(aws_scheduler_schedule.maintenance) == length(local.ingest_table_names) && alltrue([
      for t in local.ingest_table_names : jsondecode(aws_scheduler_schedule.maintenance["audit-${t}"].target[0].input) == { action = "audit", table = t }
    ])
    error_message = "An audit schedule runs per pipeline table (not on dead-letter tables), with the action and table as input."
  }
}

run "queued_committer_reserved_below_mapping_concurrency" {
  command = plan

  variables {
    commit_mode       = "queued"
    function_settings = { committer = { reserved_concurrent_executions = 1 } }
  }

  expect_failures = [aws_lambda_event_source_mapping.committer]
}

run "s3tables_existing_cluster_and_vpc_with_pipelines" {
  command = apply

  variables {
    create_msk_cluster = false
    msk_cluster_arn    = "arn:aws:kafka:eu-west-1:123456789012:cluster/existing/55555555-6666"
    vpc_id             = null
    subnet_ids         = []
    function_vpc_config = {
      subnet_ids         = ["subnet-x"]
      security_group_ids = ["sg-x"]
    }
    catalog       = "s3tables"
    pipeline_file = "tests/fixtures/pipelines/pipelines.toml"
  }

  assert {
    condition     = toset(keys(aws_lambda_event_source_mapping.kafka)) == toset(["ingest-shop.orders", "ingest-shop.orders-replay", "ingest-vehicle-telemetry"])
    error_message = "One Kafka mapping per topic the pipeline file names."
  }

  assert {
    condition     = toset(output.ingest_tables) == toset(["orders", "orders_dead_letter", "vehicle_telemetry", "vehicle_telemetry_dead_letter"])
    error_message = "IAM is scoped to the pipeline tables and their dead-letter tables."
  }

  assert {
    condition = toset(flatten([
      for s in jsondecode(aws_iam_role_policy.function["ingest"].policy).Statement : s.Condition.StringEquals["s3tables:tableName"] if s.Sid == "S3TablesOwnTables"
    ])) == toset(output.ingest_tables)
    error_message = "The ingest role reaches exactly the pipeline tables of the table bucket."
  }

  assert {
    condition     = aws_lambda_function.this["ingest"].environment[0].variables["ICESTREAM_PIPELINES"] == "s3://${aws_s3_bucket.this["config"].id}/icestream-pipelines/icestream/pipelines.toml"
    error_message = "ingest reads the uploaded pipeline file."
  }

  assert {
    condition     = toset(keys(aws_s3_object.pipeline)) == toset(["pipelines.toml", "schemas/vehicle_telemetry.proto"])
    error_message = "The pipeline file and the files beside it are uploaded."
  }

  assert {
    condition     = strcontains(aws_lambda_function.this["ingest"].description, "pipelines ")
    error_message = "The pipeline file's digest is in ingest's description, so a new file replaces warm environments."
  }

  assert {
    condition     = !contains(keys(aws_lambda_function.this["ingest"].environment[0].variables), "ICESTREAM_TABLE")
    error_message = "With a pipeline file the single-pipeline knobs are not set."
  }

  assert {
    condition     = length(aws_lakeformation_resource.s3tables) == 0 && output.s3tables_analytics_catalog_command == null
    error_message = "The account-wide analytics integration is off unless asked for (it fails where the account has it, and destroy would remove it)."
  }
}

run "s3tables_analytics_integration_and_readers" {
  command = apply

  variables {
    catalog                        = "s3tables"
    s3tables_analytics_integration = true
    lake_formation                 = { readers = ["arn:aws:iam::123456789012:role/analyst"] }
  }

  assert {
    condition     = length(aws_lakeformation_resource.s3tables) == 1 && aws_lakeformation_resource.s3tables[0].with_federation
    error_message = "Asked for, the table buckets are integrated with the AWS analytics services."
  }

  assert {
    condition     = [for s in jsondecode(aws_iam_role_policy.s3tables_lakeformation[0].policy).Statement : s.Resource if contains(s.Action, "s3tables:ListTableBuckets")] == [["*"]]
    error_message = "s3tables:ListTableBuckets has no resource type: it is granted on * alone."
  }

  assert {
    condition = (
      length(output.s3tables_reader_grant_commands) == 1 &&
      strcontains(output.s3tables_reader_grant_commands[0], "DataLakePrincipalIdentifier=arn:aws:iam::123456789012:role/analyst") &&
      strcontains(output.s3tables_reader_grant_commands[0], jsonencode({ Table = { CatalogId = "123456789012:s3tablescatalog/icestream-tables", DatabaseName = "bigdata", TableWildcard = {} } }))
    )
    error_message = "Each reader's grant on the namespace's tables in the federated s3tablescatalog/<bucket> is printed."
  }
}

run "provisioned_pollers" {
  command = plan

  variables {
    msk_cluster_type    = "provisioned"
    msk_broker_count    = 4
    provisioned_pollers = { minimum_pollers = 2, maximum_pollers = 8 }
    pipeline_file       = "tests/fixtures/pipelines/pipelines.toml"
  }

  assert {
    condition     = alltrue([for m in aws_lambda_event_source_mapping.kafka : m.provisioned_poller_config[0].minimum_pollers == 2 && m.provisioned_poller_config[0].maximum_pollers == 8 && m.maximum_retry_attempts == -1 && m.maximum_record_age_in_seconds == -1])
    error_message = "Every Kafka mapping runs provisioned pollers and retries a failing batch until it succeeds (no batch is skipped by default)."
  }

  assert {
    condition     = length(aws_lambda_event_source_mapping.kafka) == 3
    error_message = "Three pipeline topics: three mappings."
  }
}

run "on_demand_pollers_need_acknowledgement_of_bounds" {
  command = plan

  variables {
    provisioned_pollers    = { enabled = false }
    maximum_retry_attempts = 5
  }

  expect_failures = [aws_lambda_event_source_mapping.kafka]
}

# On-demand mode retries until success, as the defaults ask: nothing to acknowledge.
run "on_demand_pollers_with_unbounded_retries" {
  command = plan

  variables {
    provisioned_pollers = { enabled = false }
  }
}

run "bounded_retries_need_an_s3_destination" {
  command = plan

  variables {
    maximum_retry_attempts = 10
    on_failure_destination = "sqs"
  }

  expect_failures = [var.maximum_retry_attempts]
}

run "bounded_record_age_needs_an_s3_destination" {
  command = plan

  variables {
    maximum_record_age_in_seconds = 86400
    on_failure_destination        = "sqs"
  }

  expect_failures = [var.maximum_record_age_in_seconds]
}

run "bounded_retries_need_the_event_count_metrics" {
  command = plan

  variables {
    maximum_retry_attempts = 10
    esm_metrics            = []
  }

  expect_failures = [aws_lambda_event_source_mapping.kafka]
}

run "bounded_retries_keep_discarded_batches_in_s3_and_alarm" {
  command = apply

  variables {
    maximum_retry_attempts        = 10
    maximum_record_age_in_seconds = 86400
    on_failure_destination        = "s3"
  }

  assert {
    condition     = alltrue([for m in aws_lambda_event_source_mapping.kafka : m.maximum_retry_attempts == 10 && m.destination_config[0].on_failure[0].destination_arn == "arn:aws:s3:::${aws_s3_bucket.this["failures"].id}"])
    error_message = "Bounded mappings discard to the S3 bucket."
  }

  assert {
    condition = toset(keys(aws_cloudwatch_metric_alarm.discarded_batches)) == toset(keys(aws_lambda_event_source_mapping.kafka)) && alltrue([
      for k, a in aws_cloudwatch_metric_alarm.discarded_batches : a.metric_name == "OnFailureDestinationDeliveredEventCount" && a.namespace == "AWS/Lambda" && a.dimensions["EventSourceMappingUUID"] == aws_lambda_event_source_mapping.kafka[k].uuid && a.threshold == 0
    ])
    error_message = "Every Kafka mapping's deliveries to the on-failure destination are alarmed."
  }

  assert {
    condition     = output.recover_uri == "s3://${aws_s3_bucket.this["failures"].id}/"
    error_message = "The recover URI is the failures bucket."
  }
}

run "bring_your_own" {
  command = plan

  variables {
    kms_key_arn              = "arn:aws:kms:eu-west-1:123456789012:key/byo"
    warehouse_bucket_name    = "byo-warehouse"
    permissions_boundary_arn = "arn:aws:iam::123456789012:policy/boundary"
    lake_formation           = { readers = ["arn:aws:iam::123456789012:role/analyst"] }
  }

  assert {
    condition     = length(aws_kms_key.this) == 0 && !contains(keys(aws_s3_bucket.this), "warehouse")
    error_message = "A given key and warehouse bucket are used, not created."
  }

  assert {
    condition     = aws_lambda_function.this["ingest"].environment[0].variables["ICESTREAM_WAREHOUSE"] == "s3://byo-warehouse/warehouse"
    error_message = "The functions use the given warehouse bucket."
  }

  assert {
    condition     = alltrue([for r in aws_iam_role.function : r.permissions_boundary == "arn:aws:iam::123456789012:policy/boundary"]) && aws_iam_role.scheduler.permissions_boundary == "arn:aws:iam::123456789012:policy/boundary"
    error_message = "Every role carries the permissions boundary."
  }

  assert {
    condition     = length(aws_lakeformation_permissions.reader_tables) == 1 && length(aws_lakeformation_permissions.function_tables) == 2
    error_message = "Lake Formation grants the functions (ingest, maintenance) and the readers."
  }
}

# A bring-your-own warehouse bucket gets no bucket policy of ours: the roles' S3 grants hold
# only over TLS.
run "s3_grants_hold_only_over_tls" {
  command = apply

  variables {
    warehouse_bucket_name = "byo-warehouse"
  }

  assert {
    condition = alltrue(flatten([for f, p in aws_iam_role_policy.function : [
      for s in jsondecode(p.policy).Statement : s.Condition.Bool["aws:SecureTransport"] == "true" if alltrue([for a in s.Action : startswith(a, "s3:")])
    ]]))
    error_message = "Every statement granting only S3 actions requires aws:SecureTransport."
  }

  assert {
    condition = length(flatten([for f, p in aws_iam_role_policy.function : [
      for s in jsondecode(p.policy).Statement : s.Sid if alltrue([for a in s.Action : startswith(a, "s3:")])
    ]])) > 3
    error_message = "The functions have S3 grants to check."
  }
}

# Upsert pipelines (one with a changelog) and a Glue registry, in a namespace of their own: every
# table the file implies is granted, scheduled and alarmed; tests/infra/test_contract.py checks
# the applied state against `icestream contract`.
run "upsert_changelog_and_registries" {
  command = apply

  variables {
    pipeline_file = "tests/fixtures/upsert/pipelines.toml"
    namespace     = "ledger"
  }

  assert {
    condition = toset(output.ingest_tables) == toset([
      "accounts", "accounts_dead_letter", "accounts_changelog", "limits", "limits_dead_letter", "payments", "payments_dead_letter"
    ])
    error_message = "An upsert pipeline with changelog = true writes <table>_changelog too."
  }

  assert {
    condition = alltrue([for f in ["ingest", "committer", "maintenance"] : contains(flatten([
      for s in jsondecode(aws_iam_role_policy.function[f].policy).Statement : s.Resource if s.Sid == "GlueOwnTables"
    ]), "arn:aws:glue:eu-west-1:123456789012:table/ledger/accounts_changelog") if contains(keys(aws_iam_role_policy.function), f)])
    error_message = "The writers and maintenance reach the changelog table in the Glue catalog."
  }

  assert {
    condition     = toset([for k, s in aws_scheduler_schedule.maintenance : jsondecode(s.target[0].input).table if jsondecode(s.target[0].input).action == "purge-tombstones"]) == toset(["accounts", "limits"])
    error_message = "purge-tombstones runs on every upsert table (and only there)."
  }

  assert {
    condition     = contains([for k, s in aws_scheduler_schedule.maintenance : jsondecode(s.target[0].input).table if jsondecode(s.target[0].input).action == "compact"], "accounts_changelog")
    error_message = "The changelog table is compacted like every other table."
  }

  assert {
    condition = alltrue([for f in ["ingest", "maintenance"] : contains([
      for s in jsondecode(aws_iam_role_policy.function[f].policy).Statement : s.Sid if contains(s.Action, "glue:GetSchemaVersion") && s.Resource == ["*"]
    ], "ReadGlueSchemaVersions")])
    error_message = "A Glue registry lookup by SchemaVersionId is authorised on *: the decoders (ingest, maintenance) get it there."
  }

  assert {
    condition     = aws_lambda_function.this["ingest"].environment[0].variables["ICESTREAM_NAMESPACE"] == "ledger"
    error_message = "The functions use the file's namespace."
  }
}

run "provisioned_brokers_spread_evenly_over_the_subnets" {
  command = plan

  variables {
    msk_cluster_type = "provisioned"
    msk_broker_count = 3
    subnet_ids       = ["subnet-a", "subnet-b"]
  }

  expect_failures = [aws_msk_cluster.this]
}

run "vpc_functions_manage_their_network_interfaces" {
  command = apply

  variables {
    function_vpc_config = { subnet_ids = ["subnet-x"], security_group_ids = ["sg-x"] }
  }

  assert {
    condition = alltrue([for f, p in aws_iam_role_policy.function : length(setsubtract(
      ["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
      flatten([for s in jsondecode(p.policy).Statement : s.Action if s.Sid == "ManagePollerNetworkInterfaces"])
    )) == 0])
    error_message = "Every VPC-attached function may create, delete and re-address its network interfaces."
  }
}

run "s3tables_data_and_create_table_are_scoped_by_name" {
  command = apply

  variables {
    catalog = "s3tables"
  }

  assert {
    condition = alltrue([for f, p in aws_iam_role_policy.function : alltrue([
      for s in jsondecode(p.policy).Statement : (
        s.Condition.StringEquals["s3tables:namespace"] == ["bigdata"] &&
        (s.Sid == "S3TablesCreateTablesInNamespace" || length(lookup(s.Condition.StringEquals, "s3tables:tableName", [])) > 0)
      ) if contains(s.Action, "s3tables:GetTableData") || contains(s.Action, "s3tables:PutTableData") || contains(s.Action, "s3tables:CreateTable")
    ])])
    error_message = "Table data and table creation are conditioned on the namespace (and, for data, the table names)."
  }
}

# A self-managed cluster (Confluent Cloud, Redpanda, Kafka on EC2) instead of MSK.
run "self_managed_kafka_with_scram_in_a_vpc" {
  command = apply

  variables {
    create_msk_cluster = false
    vpc_id             = null
    subnet_ids         = []
    self_managed_kafka = {
      bootstrap_servers  = ["b1.kafka.example.com:9096", "b2.kafka.example.com:9096"]
      authentication     = "SASL_SCRAM_512_AUTH"
      secret_arn         = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kafka-scram-AbCdEf"
      secret_kms_key_arn = "arn:aws:kms:eu-west-1:123456789012:key/kafka-secrets"
      subnet_ids         = ["subnet-p"]
      security_group_ids = ["sg-p"]
    }
  }

  assert {
    condition = alltrue([for m in aws_lambda_event_source_mapping.kafka : (
      m.event_source_arn == null &&
      m.self_managed_event_source[0].endpoints["KAFKA_BOOTSTRAP_SERVERS"] == "b1.kafka.example.com:9096,b2.kafka.example.com:9096" &&
      length(m.amazon_managed_kafka_event_source_config) == 0 &&
      startswith(m.self_managed_kafka_event_source_config[0].consumer_group_id, "icestream-ingest-") &&
      toset([for c in m.source_access_configuration : "${c.type}=${c.uri}"]) == toset([
        "SASL_SCRAM_512_AUTH=arn:aws:secretsmanager:eu-west-1:123456789012:secret:kafka-scram-AbCdEf",
        "VPC_SUBNET=subnet:subnet-p", "VPC_SECURITY_GROUP=security_group:sg-p",
      ])
    )])
    error_message = "Every mapping reads the self-managed brokers with its consumer group, credentials and VPC placement."
  }

  assert {
    condition = (
      contains([for s in jsondecode(aws_iam_role_policy.function["ingest"].policy).Statement : s.Sid if s.Action == ["secretsmanager:GetSecretValue"] && s.Resource == ["arn:aws:secretsmanager:eu-west-1:123456789012:secret:kafka-scram-AbCdEf"]], "ReadKafkaCredentials") &&
      contains([for s in jsondecode(aws_iam_role_policy.function["ingest"].policy).Statement : s.Sid], "DecryptKafkaCredentials") &&
      !anytrue([for s in jsondecode(aws_iam_role_policy.function["ingest"].policy).Statement : anytrue([for a in s.Action : startswith(a, "kafka")])])
    )
    error_message = "The mapping reads the credentials with the ingest role; no MSK grants remain."
  }

  assert {
    condition     = output.msk_cluster_arn == null && output.msk_bootstrap_brokers_sasl_iam == null
    error_message = "No MSK cluster with a self-managed source."
  }
}

run "self_managed_kafka_replaces_msk" {
  command = plan

  variables {
    self_managed_kafka = { bootstrap_servers = ["b1:9092"], authentication = "NONE" }
  }

  expect_failures = [aws_lambda_event_source_mapping.kafka]
}

run "self_managed_kafka_needs_its_secret" {
  command = plan

  variables {
    create_msk_cluster = false
    self_managed_kafka = { bootstrap_servers = ["b1:9092"], authentication = "BASIC_AUTH" }
  }

  expect_failures = [var.self_managed_kafka]
}

# glue_maintenance = "glue": the role Glue's table optimizers run as, the maintenance role's
# grants to set them up with it, and the maintenance function's knobs; the schedules as before.
run "glue_table_optimizers" {
  command = apply

  variables {
    pipeline_file    = "tests/fixtures/pipelines/pipelines.toml"
    glue_maintenance = "glue"
  }

  # An ARN of its own, so a PassRole on another role (a function's) shows.
  override_resource {
    target = aws_iam_role.glue_optimizer
    values = { arn = "arn:aws:iam::123456789012:role/icestream-glue-optimizer-1" }
  }

  assert {
    condition = (
      jsondecode(aws_iam_role.glue_optimizer[0].assume_role_policy).Statement[0].Principal.Service == "glue.amazonaws.com" &&
      jsondecode(aws_iam_role.glue_optimizer[0].assume_role_policy).Statement[0].Action == "sts:AssumeRole" &&
      output.glue_optimizer_role_arn == aws_iam_role.glue_optimizer[0].arn
    )
    error_message = "The optimizers' role is trusted by Glue (and output)."
  }

  assert {
    condition = alltrue([for t in local.function_tables["maintenance"] : (
      contains(one([for s in jsondecode(aws_iam_role_policy.glue_optimizer[0].policy).Statement : s.Resource if s.Sid == "ReadWriteDeleteTableFiles"]), "arn:aws:s3:::${local.warehouse_bucket_name}/warehouse/bigdata.db/${t}/*") &&
      contains(one([for s in jsondecode(aws_iam_role_policy.glue_optimizer[0].policy).Statement : s.Resource if s.Sid == "ReadAndCommitTables"]), "arn:aws:glue:eu-west-1:123456789012:table/bigdata/${t}") &&
      contains(one([for s in jsondecode(aws_iam_role_policy.glue_optimizer[0].policy).Statement : s.Condition.StringLike["s3:prefix"] if s.Sid == "ListTableLocations"]), "warehouse/bigdata.db/${t}/*")
    )]) && length(local.function_tables["maintenance"]) > 2
    error_message = "The optimizers' role reads, writes, lists and deletes under each maintained table's location, and reads and commits those tables."
  }

  assert {
    condition = (
      toset(one([for s in jsondecode(aws_iam_role_policy.glue_optimizer[0].policy).Statement : s.Action if s.Sid == "ReadWriteDeleteTableFiles"])) == toset(["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]) &&
      toset(one([for s in jsondecode(aws_iam_role_policy.glue_optimizer[0].policy).Statement : s.Action if s.Sid == "ReadAndCommitTables"])) == toset(["glue:GetDatabase", "glue:GetTable", "glue:UpdateTable"]) &&
      toset(one([for s in jsondecode(aws_iam_role_policy.glue_optimizer[0].policy).Statement : s.Resource if s.Sid == "WriteOptimizerLogs"])) == toset([
        for k in ["compaction", "retention", "orphan-file-deletion"] : "arn:aws:logs:eu-west-1:123456789012:log-group:/aws-glue/iceberg-${k}/logs:*"
      ])
    )
    error_message = "The optimizers' role has the permissions AWS documents for Iceberg table optimizers, and their log groups."
  }

  assert {
    condition = (
      toset(one([for s in jsondecode(aws_iam_role_policy.function["maintenance"].policy).Statement : s.Action if s.Sid == "GlueTableOptimizers"])) == toset(["glue:GetTableOptimizer", "glue:CreateTableOptimizer", "glue:UpdateTableOptimizer"]) &&
      alltrue([for t in local.function_tables["maintenance"] : contains(one([for s in jsondecode(aws_iam_role_policy.function["maintenance"].policy).Statement : s.Resource if s.Sid == "GlueTableOptimizers"]), "arn:aws:glue:eu-west-1:123456789012:table/bigdata/${t}")]) &&
      one([for s in jsondecode(aws_iam_role_policy.function["maintenance"].policy).Statement : s if s.Sid == "PassGlueOptimizerRole"]).Resource == ["arn:aws:iam::123456789012:role/icestream-glue-optimizer-1"] &&
      one([for s in jsondecode(aws_iam_role_policy.function["maintenance"].policy).Statement : s if s.Sid == "PassGlueOptimizerRole"]).Condition.StringEquals["iam:PassedToService"] == ["glue.amazonaws.com"] &&
      length([for s in jsondecode(aws_iam_role_policy.function["ingest"].policy).Statement : s if contains(["GlueTableOptimizers", "PassGlueOptimizerRole"], s.Sid)]) == 0
    )
    error_message = "Maintenance alone sets up the optimizers on its tables and passes exactly the optimizers' role, to Glue only."
  }

  assert {
    condition = (
      aws_lambda_function.this["maintenance"].environment[0].variables["ICESTREAM_GLUE_MAINTENANCE"] == "glue" &&
      aws_lambda_function.this["maintenance"].environment[0].variables["ICESTREAM_GLUE_OPTIMIZER_ROLE_ARN"] == "arn:aws:iam::123456789012:role/icestream-glue-optimizer-1" &&
      !contains(keys(aws_lambda_function.this["ingest"].environment[0].variables), "ICESTREAM_GLUE_MAINTENANCE")
    )
    error_message = "The maintenance function gets the choice and the optimizers' role; ingest does not."
  }

  assert {
    condition = alltrue(flatten([for a, _ in var.maintenance_schedules : [
      for t in local.maintenance_tables : contains(keys(aws_scheduler_schedule.maintenance), "${a}-${t}") if a != "purge-tombstones" && a != "audit"
    ]])) && contains(keys(var.maintenance_schedules), "compact") && contains(keys(var.maintenance_schedules), "expire")
    error_message = "The schedules stay as they are: every action on every table, those Glue's optimizers run too (each run keeps them set up)."
  }
}

run "glue_maintenance_needs_the_glue_catalog" {
  command = plan

  variables {
    catalog          = "s3tables"
    glue_maintenance = "glue"
  }

  expect_failures = [aws_lambda_function.this]
}

run "glue_maintenance_is_ours_or_glue" {
  command = plan

  variables {
    glue_maintenance = "aws"
  }

  expect_failures = [var.glue_maintenance]
}
