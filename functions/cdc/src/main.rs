//! AWS Lambda: MSK record batches of a DMS-like CDC feed into the changelog and the guarded
//! mirror. Config, catalog and tables are set up once per execution environment.

#![recursion_limit = "256"]

use std::sync::Arc;

use icestream::Config;
use icestream::cdc::{CdcPipeline, CdcSummary};
use icestream::model::event::parse_event;
use lambda_runtime::{Context, Error};

/// Time kept back from the invocation deadline to report the outcome.
const REPLY_MARGIN_MS: u64 = 1_500;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let config = Config::from_env()?;
    icestream::base::logging::init(&config.log_format);
    // The knobs this function reads: icestream::services::deployment::CDC (checked against Terraform).
    icestream::services::deployment::CDC.warn_unread_knobs();
    let pipeline = Arc::new(CdcPipeline::new(config).await?);
    // The event is read from the invocation's raw body by our parser (icestream::services::lambda).
    icestream::services::lambda::run(move |event: bytes::Bytes, context: Context| {
        let pipeline = pipeline.clone();
        async move { handle(&pipeline, &event, &context).await }
    })
    .await
}

async fn handle(pipeline: &CdcPipeline, event: &[u8], context: &Context) -> Result<CdcSummary, Error> {
    let deadline = icestream::base::logging::deadline_from_epoch_ms(context.deadline, REPLY_MARGIN_MS);
    let parsed = parse_event(event)?;
    let summary = pipeline.handle(parsed, deadline).await?;
    println!("{}", icestream::services::metrics::emf_line_of("cdc", &summary.metrics()));
    Ok(summary)
}
