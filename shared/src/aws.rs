//! AWS SDK clients and errors. Clients come from the standard chain (`aws-config`: Lambda's
//! environment, profiles, IMDS; `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` overrides),
//! so the same binary talks to AWS or to a local server with no code path of its own.

use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};

use crate::error::Error;

/// Shared SDK configuration, loaded once per process.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await
}

/// S3 client settings from the shared configuration: the `AWS_ENDPOINT_URL_S3` override, and
/// path-style addressing when asked or when the endpoint is a local server (an IP address or
/// `localhost`, where virtual-host buckets cannot resolve).
pub fn s3_config(sdk: &aws_config::SdkConfig, path_style: bool) -> aws_sdk_s3::Config {
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3").ok().filter(|v| !v.is_empty()).or_else(|| sdk.endpoint_url().map(str::to_string));
    let mut s3 = aws_sdk_s3::config::Builder::from(sdk);
    let local = endpoint.as_deref().is_some_and(is_local_endpoint);
    if let Some(endpoint) = endpoint {
        s3 = s3.endpoint_url(endpoint);
    }
    s3.force_path_style(path_style || local).build()
}

/// Whether an endpoint URL names a host that virtual-host addressing cannot work with.
pub fn is_local_endpoint(url: &str) -> bool {
    let host = url.split("://").nth(1).unwrap_or(url).split(['/', '?']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let name = if host.starts_with('[') { host.split(']').next().unwrap_or(host).trim_start_matches('[') } else { host.split(':').next().unwrap_or(host) };
    name == "localhost" || name.parse::<std::net::IpAddr>().is_ok()
}

/// Error codes that mean "try again later" on any AWS API.
const THROTTLING: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
    "ServiceUnavailable",
    "InternalServiceException",
    "InternalServerError",
];

/// Whether an AWS error code asks the caller to back off and try again.
pub fn is_throttling(code: &str) -> bool {
    THROTTLING.contains(&code)
}

/// Turn an SDK error into ours, naming the action and resource; access errors say which IAM
/// action is missing on which resource.
pub fn error<E, R>(action: &str, resource: &str, err: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().unwrap_or_default().to_string();
    let detail = err.message().map(str::to_string).unwrap_or_else(|| format!("{err}"));
    let transient = matches!(err, SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_));
    let retryable = transient || is_throttling(&code);
    let message = if code.contains("AccessDenied") || code == "UnauthorizedOperation" {
        format!("access denied: the role needs `{action}` on {resource} ({detail})")
    } else if code.contains("NotFound") || code == "EntityNotFoundException" {
        format!("{action}: {resource} does not exist ({detail})")
    } else {
        format!("{action} on {resource} failed: {code} {detail}")
    };
    Error::Aws { message, retryable }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_endpoints_are_ip_addresses_and_localhost() {
        for url in ["http://127.0.0.1:5000", "http://localhost:9000/", "http://[::1]:80", "http://u:p@10.0.0.1"] {
            assert!(is_local_endpoint(url), "{url}");
        }
        for url in ["https://s3.us-east-1.amazonaws.com", "https://minio.internal:9000"] {
            assert!(!is_local_endpoint(url), "{url}");
        }
    }

    #[test]
    fn throttling_is_retryable_and_access_denied_names_action_and_resource() {
        assert!(is_throttling("ThrottlingException") && is_throttling("SlowDown"));
        assert!(!is_throttling("AccessDeniedException") && !is_throttling("EntityNotFoundException"));
        let e: SdkError<aws_sdk_glue::operation::get_table::GetTableError, ()> = SdkError::construction_failure("no");
        let err = error("glue:GetTable", "bigdata.t", e);
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("glue:GetTable on bigdata.t"), "{err}");
    }
}
