variable "region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "eu-west-1"
}

variable "name" {
  description = "Name prefix of the deployment."
  type        = string
  default     = "icestream-demo"
}

variable "vpc_cidr" {
  description = "CIDR block of the new VPC."
  type        = string
  default     = "10.42.0.0/16"
}

variable "artifacts_dir" {
  description = "Directory of the Lambda zips (`<binary>/bootstrap.zip`); null: the repository's target/lambda, where `make build` writes them."
  type        = string
  default     = null
}
