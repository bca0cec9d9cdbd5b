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

variable "availability_zones" {
  description = "Zones of the private subnets (2 or 3). Empty: the first three the account can use in the region (aws_availability_zones); set them to pin the subnets."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.availability_zones) == 0 || (length(var.availability_zones) >= 2 && length(var.availability_zones) <= 3)
    error_message = "availability_zones: 2 or 3 zones, or empty."
  }
}
