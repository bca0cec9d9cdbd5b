################################################################################
# A self-managed Kafka source (Confluent Cloud, Redpanda, Kafka on EC2) instead
# of MSK: the mappings read it through its bootstrap servers, authenticated with
# a Secrets Manager secret, from the VPC subnets given (or over the internet).
################################################################################

variable "self_managed_kafka" {
  description = "Consume a self-managed Kafka cluster instead of MSK (set create_msk_cluster = false). `bootstrap_servers`: host:port list. `authentication`: SASL_SCRAM_512_AUTH, SASL_SCRAM_256_AUTH, BASIC_AUTH (SASL/PLAIN, e.g. Confluent Cloud API keys), CLIENT_CERTIFICATE_TLS_AUTH (mTLS) or NONE; `secret_arn`: the Secrets Manager secret holding the credentials (username/password, or certificate/privateKey); `root_ca_secret_arn`: a private CA of the brokers' TLS certificates; `secret_kms_key_arn`: a customer managed key encrypting those secrets. `subnet_ids`/`security_group_ids`: where the pollers attach to reach private brokers (both or neither; the subnets need a NAT gateway or VPC endpoints for STS, Lambda, Secrets Manager and the on-failure destination). null: MSK."
  type = object({
    bootstrap_servers  = list(string)
    authentication     = optional(string, "SASL_SCRAM_512_AUTH")
    secret_arn         = optional(string)
    root_ca_secret_arn = optional(string)
    secret_kms_key_arn = optional(string)
    subnet_ids         = optional(list(string), [])
    security_group_ids = optional(list(string), [])
  })
  default = null

  validation {
    condition     = var.self_managed_kafka == null || try(length(var.self_managed_kafka.bootstrap_servers) > 0 && alltrue([for s in var.self_managed_kafka.bootstrap_servers : can(regex("^[A-Za-z0-9.-]+:[0-9]{1,5}$", s))]), false)
    error_message = "self_managed_kafka.bootstrap_servers needs at least one host:port."
  }

  validation {
    condition     = var.self_managed_kafka == null || try(contains(["SASL_SCRAM_512_AUTH", "SASL_SCRAM_256_AUTH", "BASIC_AUTH", "CLIENT_CERTIFICATE_TLS_AUTH", "NONE"], var.self_managed_kafka.authentication), false)
    error_message = "self_managed_kafka.authentication must be one of SASL_SCRAM_512_AUTH, SASL_SCRAM_256_AUTH, BASIC_AUTH, CLIENT_CERTIFICATE_TLS_AUTH, NONE."
  }

  validation {
    condition     = var.self_managed_kafka == null || try((var.self_managed_kafka.authentication == "NONE") == (var.self_managed_kafka.secret_arn == null), false)
    error_message = "self_managed_kafka.secret_arn holds the credentials: required for every authentication but NONE (and not used with NONE)."
  }

  validation {
    condition     = var.self_managed_kafka == null || try((length(var.self_managed_kafka.subnet_ids) > 0) == (length(var.self_managed_kafka.security_group_ids) > 0), false)
    error_message = "self_managed_kafka: give subnet_ids and security_group_ids together (private brokers), or neither (brokers reachable over the internet)."
  }
}
