//! AWS SDK clients and errors. Clients come from the standard chain (`aws-config`: Lambda's
//! environment, profiles, IMDS; `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>` overrides),
//! so the same binary talks to AWS or to a local server with no code path of its own.

use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};

use crate::error::Error;

/// Shared SDK configuration, loaded once per process.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await
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
    fn throttling_is_retryable_and_access_denied_names_action_and_resource() {
        assert!(is_throttling("ThrottlingException") && is_throttling("SlowDown"));
        assert!(!is_throttling("AccessDeniedException") && !is_throttling("EntityNotFoundException"));
        let e: SdkError<aws_sdk_glue::operation::get_table::GetTableError, ()> = SdkError::construction_failure("no");
        let err = error("glue:GetTable", "bigdata.t", e);
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("glue:GetTable on bigdata.t"), "{err}");
    }
}
