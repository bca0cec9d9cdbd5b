# The existing-msk example against the mock AWS provider (offline).

mock_provider "aws" {
  source = "../../tests/mocks"
}

variables {
  artifacts_dir      = "../../tests/fixtures/lambda"
  msk_cluster_arn    = "arn:aws:kafka:eu-west-1:123456789012:cluster/existing/55555555-6666"
  subnet_ids         = ["subnet-x", "subnet-y"]
  security_group_ids = ["sg-x"]
}

run "existing_msk" {
  command = apply

  assert {
    condition     = module.icestream.catalog == "s3tables" && module.icestream.recover_uri != null
    error_message = "S3 Tables, with discarded batches kept in S3 for `icestream recover`."
  }
}
