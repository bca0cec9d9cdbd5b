//! AWS SDK clients and errors. Clients come from the standard chain (`aws-config`: Lambda's
//! environment, profiles, IMDS; `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` overrides),
//! so the same binary talks to AWS or to a local server with no code path of its own.

use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};

use crate::base::error::Error;

/// Shared SDK configuration, loaded once per process.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await
}

/// An endpoint override for one service: `AWS_ENDPOINT_URL_<SERVICE>`, else `AWS_ENDPOINT_URL`
/// (the SDK's own convention, applied here to the clients iceberg-rust builds itself).
pub fn service_endpoint(sdk: &aws_config::SdkConfig, service: &str) -> Option<String> {
    std::env::var(format!("AWS_ENDPOINT_URL_{service}")).ok().filter(|v| !v.is_empty()).or_else(|| sdk.endpoint_url().map(str::to_string))
}

/// S3 addressing: the `s3_path_style` knob if set, else path style when the endpoint is an IP
/// address or localhost, where virtual-host names (`bucket.127.0.0.1`) cannot resolve; the AWS
/// SDKs of other languages choose the same way.
pub fn s3_path_style(configured: Option<bool>, endpoint: Option<&str>) -> bool {
    if let Some(path_style) = configured {
        return path_style;
    }
    let local = endpoint.is_some_and(is_local_endpoint);
    if local {
        tracing::info!(endpoint, "S3 endpoint is an IP address or localhost: path-style addressing (s3_path_style=false overrides)");
    }
    local
}

/// Whether an endpoint URL names a host virtual-host addressing cannot work with: an IP
/// address, `localhost` or a `*.localhost` name.
fn is_local_endpoint(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    name == "localhost" || name.ends_with(".localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// S3 client settings from the shared configuration: the S3 endpoint override and the
/// addressing [`s3_path_style`] chooses.
pub fn s3_config(sdk: &aws_config::SdkConfig, configured_path_style: Option<bool>) -> aws_sdk_s3::Config {
    let endpoint = service_endpoint(sdk, "S3");
    let path_style = s3_path_style(configured_path_style, endpoint.as_deref());
    let mut s3 = aws_sdk_s3::config::Builder::from(sdk);
    if let Some(endpoint) = endpoint {
        s3 = s3.endpoint_url(endpoint);
    }
    s3.force_path_style(path_style).build()
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
    fn path_style_is_chosen_for_ip_and_localhost_endpoints_unless_configured() {
        for local in ["http://127.0.0.1:5000", "http://localhost:9000/", "http://[::1]:4566", "http://minio.localhost"] {
            assert!(s3_path_style(None, Some(local)), "{local}");
            assert!(!s3_path_style(Some(false), Some(local)), "{local}");
        }
        for remote in ["https://s3.eu-west-1.amazonaws.com", "https://minio.example.com"] {
            assert!(!s3_path_style(None, Some(remote)), "{remote}");
            assert!(s3_path_style(Some(true), Some(remote)), "{remote}");
        }
        assert!(!s3_path_style(None, None));
        assert!(!s3_path_style(None, Some("not a url")));
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
