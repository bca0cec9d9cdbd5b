//! `icestream dead-letters replay TABLE [since=] [reason=] [dry-run=true] [key=value ...]`: the
//! dead letters of a pipeline table decoded again with the current pipeline and appended once
//! ([`icestream::services::replay`]); prints the report as JSON.

use anyhow::Result;
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::services::replay::{ReplayFilter, replay};
use icestream::{Config, IngestPipeline};

const REPLAY_OPTIONS: &[Knob] = &[
    Knob {
        key: "since",
        default: "",
        allowed: Allowed::Text,
        help: "Only dead letters rejected since this RFC 3339 time or age (90m, 6h, 7d); empty: all",
    },
    Knob { key: "reason", default: "", allowed: Allowed::Text, help: "Only dead letters whose reason contains this text; empty: all" },
    Knob { key: "dry-run", default: "false", allowed: Allowed::OneOf(&["true", "false"]), help: "Only report what would be replayed" },
];

/// The command's option list for the command line (`crate::cli`).
pub struct Replay;

impl crate::cli::OptionList for Replay {
    const LISTS: &'static [&'static [Knob]] = &[REPLAY_OPTIONS];
}

pub async fn run(table: String, args: Vec<String>) -> Result<()> {
    let (options, knobs) = Settings::split_options(REPLAY_OPTIONS, &args)?;
    let config = Config::from_env_and_args(&knobs)?;
    icestream::base::logging::init(&config.log_format);
    let filter = ReplayFilter::parse(options.get("since"), options.get("reason"), chrono::Utc::now().timestamp_micros())?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(config.commit_timeout_ms);
    let pipeline = IngestPipeline::new(config).await?;
    let report = replay(&pipeline, &table, &filter, options.get("dry-run") == "true", deadline).await?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
