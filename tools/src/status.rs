//! `icestream status [output=text|json] [key=value ...]`: per pipeline table, the last commit,
//! freshness, rows and files in the last hour, small files waiting for compaction, dead
//! letters in the last hour and pending queued commit requests ([`icestream::services::status`]).

use anyhow::Result;
use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::model::pipeline::PipelineSet;

const STATUS_OPTIONS: &[Knob] = &[Knob {
    key: "output",
    default: "text",
    allowed: Allowed::OneOf(&["text", "json"]),
    help: "`text`: one line per table for people; `json`: an array of table statuses",
}];

/// The command's option list for the command line (`crate::cli`).
pub struct Status;

impl crate::cli::OptionList for Status {
    const LISTS: &'static [&'static [Knob]] = &[STATUS_OPTIONS];
}

pub async fn run(args: Vec<String>) -> Result<()> {
    let (options, knobs) = Settings::split_options(STATUS_OPTIONS, &args)?;
    let mut config = Config::from_env_and_args(&knobs)?;
    icestream::base::logging::init(&config.log_format);
    let set = PipelineSet::from_config(&config).await?;
    config.namespace = set.namespace.clone();
    let catalogs = Catalogs::connect_read_only(&config).await?;
    let statuses = icestream::services::status::status(&set, &catalogs, &config, chrono::Utc::now().timestamp_millis()).await?;
    if options.get("output") == "json" {
        println!("{}", serde_json::to_string(&statuses)?);
    } else {
        print!("{}", icestream::services::status::text(&statuses));
    }
    Ok(())
}
