//! AWS Lambda: MSK (or self-managed Kafka) record batches into the icestream telemetry table.
//! Config, catalog and tables are set up once per execution environment, outside the handler.

// The ingest future (catalog, scan and writer state machines) nests deeper than the default.
#![recursion_limit = "256"]

use std::sync::Arc;

use icestream::event::{KafkaEvent, from_kafka_event};
use icestream::{Config, IngestPipeline, Summary};
use lambda_runtime::{Error, LambdaEvent, service_fn};

/// Time kept back from the invocation deadline to report the outcome.
const REPLY_MARGIN_MS: u64 = 1_500;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env()?;
    icestream::logging::init(&config.log_format);
    // The knobs this function reads: icestream::deployment::INGEST (checked against Terraform).
    icestream::deployment::INGEST.warn_unread_knobs();
    let pipeline = Arc::new(IngestPipeline::new(config).await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<KafkaEvent>| {
        let pipeline = pipeline.clone();
        async move { handle(&pipeline, event).await }
    }))
    .await
}

async fn handle(pipeline: &IngestPipeline, event: LambdaEvent<KafkaEvent>) -> Result<Summary, Error> {
    let deadline = icestream::logging::deadline_from_epoch_ms(event.context.deadline, REPLY_MARGIN_MS);
    let parsed = from_kafka_event(event.payload)?;
    let summary = pipeline.handle(parsed, deadline).await?;
    println!("{}", icestream::metrics::emf_line("ingest", &summary));
    for line in icestream::metrics::table_emf_lines("ingest", &summary) {
        println!("{line}");
    }
    Ok(summary)
}
