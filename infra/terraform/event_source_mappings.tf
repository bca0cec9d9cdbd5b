################################################################################
# Kafka event source mappings: one per ingest topic, one for the CDC topic, on
# MSK or on a self-managed cluster (`self_managed_kafka`).
# MSK mappings are at-least-once; icestream makes them exactly-once with the
# offset watermarks it commits atomically with each snapshot.
#
# Error handling: by default a failing batch is retried until it succeeds
# (-1/-1): a skipped batch would be lost for good, since later batches raise the
# offset watermarks past it. A stuck partition shows as the OffsetLag alarm.
# Bounds (`maximum_retry_attempts`, `maximum_record_age_in_seconds`) are allowed
# only with an S3 on-failure destination, which keeps the discarded event whole
# (`icestream recover` ingests it again, below the watermark, once), and are
# alarmed on OnFailureDestinationDeliveredEventCount. AWS honours bounds for
# Kafka only in provisioned mode: bounds in on-demand mode must be acknowledged
# with `allow_unbounded_kafka_retries`.
################################################################################

resource "aws_lambda_event_source_mapping" "kafka" {
  for_each = local.kafka_mappings

  function_name    = aws_lambda_function.this[each.value.function].arn
  event_source_arn = local.msk_cluster_arn
  topics           = [each.value.topic]

  starting_position                  = var.starting_position
  batch_size                         = each.value.batch
  maximum_batching_window_in_seconds = each.value.window

  dynamic "amazon_managed_kafka_event_source_config" {
    for_each = local.self_managed ? [] : [each.value.group]

    content {
      consumer_group_id = amazon_managed_kafka_event_source_config.value
    }
  }

  # A self-managed cluster (Confluent Cloud, Redpanda, Kafka on EC2): its brokers, consumer
  # group, credentials and VPC placement; its events carry eventSource "SelfManagedKafka".
  dynamic "self_managed_event_source" {
    for_each = local.self_managed ? [join(",", var.self_managed_kafka.bootstrap_servers)] : []

    content {
      endpoints = { KAFKA_BOOTSTRAP_SERVERS = self_managed_event_source.value }
    }
  }

  dynamic "self_managed_kafka_event_source_config" {
    for_each = local.self_managed ? [each.value.group] : []

    content {
      consumer_group_id = self_managed_kafka_event_source_config.value
    }
  }

  dynamic "source_access_configuration" {
    for_each = local.self_managed_access

    content {
      type = source_access_configuration.value.type
      uri  = source_access_configuration.value.uri
    }
  }

  # Unbounded unless asked (provisioned mode only; see header).
  maximum_retry_attempts        = local.kafka_error_controls ? var.maximum_retry_attempts : null
  maximum_record_age_in_seconds = local.kafka_error_controls ? var.maximum_record_age_in_seconds : null

  destination_config {
    on_failure {
      destination_arn = local.on_failure_destination_arn
    }
  }

  dynamic "provisioned_poller_config" {
    for_each = var.provisioned_pollers.enabled ? [var.provisioned_pollers] : []

    content {
      minimum_pollers = provisioned_poller_config.value.minimum_pollers
      maximum_pollers = provisioned_poller_config.value.maximum_pollers
    }
  }

  dynamic "metrics_config" {
    for_each = length(var.esm_metrics) > 0 ? [var.esm_metrics] : []

    content {
      metrics = metrics_config.value
    }
  }

  tags = local.tags

  # The mapping authenticates to MSK and writes failures with the function role.
  depends_on = [aws_iam_role_policy.function]

  lifecycle {
    precondition {
      condition     = var.create_msk_cluster || var.msk_cluster_arn != null || local.self_managed
      error_message = "Set msk_cluster_arn (or self_managed_kafka) when create_msk_cluster is false."
    }

    precondition {
      condition     = !local.self_managed || (!var.create_msk_cluster && var.msk_cluster_arn == null)
      error_message = "self_managed_kafka replaces MSK: set create_msk_cluster = false and leave msk_cluster_arn null."
    }

    precondition {
      condition     = local.kafka_error_controls || !local.kafka_retries_bounded || var.allow_unbounded_kafka_retries
      error_message = "Kafka mappings bound retries and record age only in provisioned mode: keep provisioned_pollers.enabled = true, or set allow_unbounded_kafka_retries = true."
    }

    precondition {
      condition     = !local.kafka_retries_bounded || contains(var.esm_metrics, "EventCount")
      error_message = "Bounded Kafka retries discard batches: keep \"EventCount\" in esm_metrics, so the OnFailureDestinationDeliveredEventCount alarm sees each discarded batch."
    }
  }
}
