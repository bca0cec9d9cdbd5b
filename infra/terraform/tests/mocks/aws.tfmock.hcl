# Values a plan needs in a known shape; everything else the mock provider invents.
mock_data "aws_partition" {
  defaults = { partition = "aws" }
}

mock_data "aws_region" {
  defaults = { id = "eu-west-1", name = "eu-west-1" }
}

mock_data "aws_caller_identity" {
  defaults = { account_id = "123456789012" }
}

mock_data "aws_iam_policy_document" {
  defaults = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
}

mock_resource "aws_msk_serverless_cluster" {
  defaults = { arn = "arn:aws:kafka:eu-west-1:123456789012:cluster/icestream/11111111-2222" }
}

mock_resource "aws_msk_cluster" {
  defaults = { arn = "arn:aws:kafka:eu-west-1:123456789012:cluster/icestream/33333333-4444" }
}

mock_resource "aws_kms_key" {
  defaults = { arn = "arn:aws:kms:eu-west-1:123456789012:key/mock-key" }
}

mock_resource "aws_s3tables_table_bucket" {
  defaults = { arn = "arn:aws:s3tables:eu-west-1:123456789012:bucket/icestream-tables" }
}

mock_resource "aws_iam_role" {
  defaults = { arn = "arn:aws:iam::123456789012:role/mock" }
}

mock_resource "aws_s3_bucket" {
  defaults = { arn = "arn:aws:s3:::mock-bucket" }
}

mock_resource "aws_lambda_function" {
  defaults = { arn = "arn:aws:lambda:eu-west-1:123456789012:function:mock" }
}

mock_resource "aws_sqs_queue" {
  defaults = {
    arn = "arn:aws:sqs:eu-west-1:123456789012:mock"
    url = "https://sqs.eu-west-1.amazonaws.com/123456789012/mock"
  }
}

mock_resource "aws_cloudwatch_log_group" {
  defaults = { arn = "arn:aws:logs:eu-west-1:123456789012:log-group:mock" }
}

mock_resource "aws_sns_topic" {
  defaults = { arn = "arn:aws:sns:eu-west-1:123456789012:mock" }
}

mock_resource "aws_athena_workgroup" {
  defaults = { arn = "arn:aws:athena:eu-west-1:123456789012:workgroup/mock" }
}
