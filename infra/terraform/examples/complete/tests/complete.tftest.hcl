# The complete example planned and applied against the mock AWS provider (offline): what it
# deploys, and the rendered policies tests/infra/test_iam_lint.py lints.

mock_provider "aws" {
  source = "../../tests/mocks"
}

# The zones the account can use (a data source: the mock cannot invent a list of names).
override_data {
  target = data.aws_availability_zones.available
  values = { names = ["eu-west-1c", "eu-west-1a", "eu-west-1b", "eu-west-1d"] }
}

variables {
  artifacts_dir = "../../tests/fixtures/lambda"
}

run "complete" {
  command = apply

  assert {
    condition     = toset([for s in aws_subnet.private : s.availability_zone]) == toset(["eu-west-1a", "eu-west-1b", "eu-west-1c"])
    error_message = "Three private subnets in zones the account has (from aws_availability_zones)."
  }

  assert {
    condition     = module.icestream.commit_queue_url != null && length(module.icestream.kafka_event_source_mappings) > 0
    error_message = "Queued commits and a Kafka mapping per pipeline topic and the CDC topic."
  }

  assert {
    condition     = alltrue([for k, m in module.icestream.kafka_event_source_mappings : m.consumer_group_id != ""])
    error_message = "Every mapping has its consumer group."
  }
}

run "pinned_zones" {
  command = plan

  variables {
    availability_zones = ["eu-west-1b", "eu-west-1c"]
  }

  assert {
    condition     = length(data.aws_availability_zones.available) == 0 && toset(keys(aws_subnet.private)) == toset(["eu-west-1b", "eu-west-1c"])
    error_message = "Given zones are used as they are, without reading the account's."
  }
}
