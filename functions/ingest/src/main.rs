//! AWS Lambda: MSK (or self-managed Kafka) record batches into the icestream telemetry table.
//! Config, catalog and tables are set up once per execution environment, outside the handler.

// The ingest future (catalog, scan and writer state machines) nests deeper than the default.
#![recursion_limit = "256"]

use std::sync::Arc;

use icestream::model::event::parse_event;
use icestream::{Config, IngestPipeline, Summary};
use lambda_runtime::{Context, Error};

/// Time kept back from the invocation deadline to report the outcome.
const REPLY_MARGIN_MS: u64 = 1_500;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env()?;
    icestream::base::logging::init(&config.log_format);
    // The knobs this function reads: icestream::services::deployment::INGEST (checked against Terraform).
    icestream::services::deployment::INGEST.warn_unread_knobs();
    let pipeline = Arc::new(IngestPipeline::new(config).await?);
    // The event is read from the invocation's raw body by our parser (icestream::services::lambda).
    icestream::services::lambda::run(move |event: bytes::Bytes, context: Context| {
        let pipeline = pipeline.clone();
        async move { handle(&pipeline, &event, &context).await }
    })
    .await
}

async fn handle(pipeline: &IngestPipeline, event: &[u8], context: &Context) -> Result<Summary, Error> {
    let deadline = icestream::base::logging::deadline_from_epoch_ms(context.deadline, REPLY_MARGIN_MS);
    let parsed = parse_event(event)?;
    let summary = pipeline.handle(parsed, deadline).await?;
    for line in icestream::services::metrics::emf_lines(&summary) {
        println!("{line}");
    }
    Ok(summary)
}
