//! Queued commits (`commit_mode=queued`): writers stage data files and a manifest
//! ([`crate::engine::commit::staged`]) and send a [`CommitRequest`] to an SQS queue
//! ([`crate::engine::queue`]); one committer per queue ([`batch`]) commits a whole batch of requests
//! per table in one snapshot. What the committer accepts is [`validate`]'s to say.

pub mod batch;
pub mod report;
pub mod validate;

#[cfg(doc)]
use crate::engine::queue::CommitRequest;
use crate::engine::queue::Message;
use crate::engine::queue::sqs;

/// After a batch: make the deferred requests visible again after `commit_gap_retry_s` instead
/// of the queue's visibility timeout (a failure to do so only delays them).
pub async fn retry_deferred_soon(
    queue: &sqs::CommitQueue,
    config: &crate::model::config::Config,
    messages: &[Message],
    report: &report::BatchReport,
) {
    let deferred: Vec<&Message> = messages.iter().filter(|m| report.deferred.contains(&m.id)).collect();
    if let Err(e) = queue.change_visibility(&deferred, config.commit_gap_retry_s).await {
        tracing::warn!(error = %e, "deferred requests come again after the visibility timeout");
    }
}

/// The SQS partial batch response for a committer batch.
pub fn batch_response(report: &report::BatchReport) -> aws_lambda_events::event::sqs::SqsBatchResponse {
    use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse};
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = report
        .batch_item_failures
        .iter()
        .map(|id| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id.clone();
            failure
        })
        .collect();
    response
}
