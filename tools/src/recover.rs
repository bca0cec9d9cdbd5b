//! `icestream recover SOURCE [dry-run=true] [key=value ...]`: the batches a Kafka event source
//! mapping discarded to its S3 on-failure destination (SOURCE = `s3://bucket/prefix`, or a local
//! copy of it) ingested into their tables below the watermark, once ([`icestream::services::recover`]);
//! prints the report as JSON.

use anyhow::Result;
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::{Config, IngestPipeline};

const RECOVER_OPTIONS: &[Knob] =
    &[Knob { key: "dry-run", default: "false", allowed: Allowed::OneOf(&["true", "false"]), help: "Only report what would be recovered" }];

/// The command's option list for the command line (`crate::cli`).
pub struct Recover;

impl crate::cli::OptionList for Recover {
    const LISTS: &'static [&'static [Knob]] = &[RECOVER_OPTIONS];
}

pub async fn run(source: String, args: Vec<String>) -> Result<()> {
    let (options, knobs) = Settings::split_options(RECOVER_OPTIONS, &args)?;
    let config = Config::from_env_and_args(&knobs)?;
    icestream::base::logging::init(&config.log_format);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(config.commit_timeout_ms);
    let pipeline = IngestPipeline::new(config).await?;
    let report = icestream::services::recover::recover(&pipeline, &source, options.get("dry-run") == "true", deadline).await?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
