//! AWS Lambda: the queued committer. Triggered by the commit request queue (SQS mapping with a
//! batching window, reserved concurrency 1): commits each table's requests of the batch in one
//! snapshot and reports the requests to deliver again as an SQS partial batch response.
//! Config and catalog are set up once per execution environment, outside the handler.

// The commit future (catalog, scan and writer state machines) nests deeper than the default.
#![recursion_limit = "256"]

use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::engine::queue::from_sqs_event;
use icestream::engine::queue::sqs::CommitQueue;
use icestream::services::queued::{batch, batch_response, retry_deferred_soon};
use lambda_runtime::{Error, LambdaEvent, service_fn};

/// Time kept back from the invocation deadline to report the outcome.
const REPLY_MARGIN_MS: u64 = 1_500;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env()?;
    icestream::base::logging::init(&config.log_format);
    // The knobs this function reads: icestream::services::deployment::COMMITTER (checked against Terraform).
    icestream::services::deployment::COMMITTER.warn_unread_knobs();
    let catalogs = Arc::new(Catalogs::connect(&config).await?);
    // With the queue's URL, deferred requests come again after `commit_gap_retry_s`.
    let queue = match config.commit_queue_url() {
        Some(url) => Some(CommitQueue::connect(url).await),
        None => None,
    };
    let shared = Arc::new((config, catalogs, queue));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let shared = shared.clone();
        async move { handle(&shared.0, &shared.1, shared.2.as_ref(), event).await }
    }))
    .await
}

async fn handle(
    config: &Config,
    catalogs: &Catalogs,
    queue: Option<&CommitQueue>,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, Error> {
    let deadline = icestream::base::logging::deadline_from_epoch_ms(event.context.deadline, REPLY_MARGIN_MS);
    let messages = from_sqs_event(event.payload)?;
    let report = batch::commit_batch(catalogs, config, &messages, deadline).await;
    if let Some(queue) = queue {
        retry_deferred_soon(queue, config, &messages, &report).await;
    }
    for line in icestream::services::metrics::emf_lines(&report) {
        println!("{line}");
    }
    Ok(batch_response(&report))
}
