//! AWS Lambda: EventBridge Scheduler → table maintenance. The schedule's input is the plain
//! object `{"action": "compact", "table": "vehicle_telemetry", "dry_run": false}` (every field
//! optional: no action = all in a safe order, no table = every table of the pipeline file, or
//! of the namespace without one). `{"action": "recover", "source": "s3://bucket/prefix"}` ingests
//! the batches a Kafka mapping discarded to its S3 on-failure destination (`icestream::services::recover`).
//! Config and catalog are set up once per execution environment, outside the handler.

#![recursion_limit = "256"]

use std::sync::Arc;

use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::services::maintenance::{MaintenanceRequest, maintain, pipeline_tables};
use icestream::services::recover::{RecoverRequest, recover};
use lambda_runtime::{Error, LambdaEvent, service_fn};

/// Time kept back from the invocation deadline to log and return the report.
const REPLY_MARGIN_MS: u64 = 5_000;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut config = Config::from_env()?;
    icestream::base::logging::init(&config.log_format);
    // The knobs this function reads: icestream::services::deployment::MAINTENANCE (checked against Terraform).
    icestream::services::deployment::MAINTENANCE.warn_unread_knobs();
    let tables = pipeline_tables(&mut config).await?;
    let catalogs = Catalogs::connect(&config).await?;
    let shared = Arc::new((config, catalogs, tables));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let shared = shared.clone();
        async move { handle(&shared.0, &shared.1, shared.2.as_ref(), event).await }
    }))
    .await
}

async fn handle(
    config: &Config,
    catalogs: &Catalogs,
    tables: Option<&Vec<String>>,
    event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, Error> {
    let deadline = icestream::base::logging::deadline_from_epoch_ms(event.context.deadline, REPLY_MARGIN_MS);
    if let Some(request) = RecoverRequest::from_event(&event.payload)? {
        // Decoded with the ingest pipeline, built for this run only (recoveries are rare).
        let pipeline = icestream::IngestPipeline::new(config.clone()).await?;
        let report = recover(&pipeline, &request.source, request.dry_run, deadline).await?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(serde_json::to_value(report)?);
    }
    let request = MaintenanceRequest::from_event(event.payload, config)?.or_tables(tables);
    let report = maintain(catalogs, &request, deadline).await?;
    println!("{}", serde_json::to_string(&report)?);
    // A failed table fails the invocation, so the schedule's retry policy and alarms see it;
    // every action is safe to run again.
    let failures = report.failures();
    if !failures.is_empty() {
        let text: Vec<String> = failures.iter().map(|(t, e)| format!("{t}: {e}")).collect();
        return Err(format!("maintenance failed for {}", text.join("; ")).into());
    }
    Ok(serde_json::to_value(report)?)
}
