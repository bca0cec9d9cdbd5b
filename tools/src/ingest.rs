//! `icestream ingest EVENT.json [EVENT.json ...] [key=value ...]`: the ingest function's code on
//! MSK event files in order, as one warm function instance would (clients and caches built
//! once); prints a one-line JSON summary per file.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use icestream::{Config, IngestPipeline};

use crate::cli::{OptionList, Options};

pub struct Ingest;

impl OptionList for Ingest {
    const LISTS: &'static [&'static [icestream::model::config::Knob]] = &[];
    const LEADING: bool = true;
    const WORDS: &'static str = "EVENT.json ... KEY=VALUE";
    const WORDS_REQUIRED: bool = true;
}

pub async fn run(options: Options<Ingest>) -> Result<()> {
    let (files, rest) = crate::cli::leading(options.words);
    if files.is_empty() {
        bail!("ingest needs an event file before the key=value words");
    }
    let config = Config::from_env_and_args(&rest)?;
    icestream::base::logging::init(&config.log_format);
    let budget = Duration::from_millis(config.commit_timeout_ms);
    // Every event is read and routed before the pipeline creates a table: a file that is
    // not an event, or a topic no pipeline claims, fails with nothing created.
    let set = icestream::model::pipeline::PipelineSet::from_config(&config).await?;
    for file in &files {
        let event = icestream::model::event::parse_event(&std::fs::read(file).with_context(|| format!("reading {file}"))?)?;
        for tp in event.partitions.keys() {
            set.check_route(&tp.topic)?;
        }
    }
    let pipeline = IngestPipeline::new(config).await?;
    for file in files {
        let json = std::fs::read(&file).with_context(|| format!("reading {file}"))?;
        // The parsed event owns what it needs: the file's bytes go before the work starts.
        let event = icestream::model::event::parse_event(&json)?;
        drop(json);
        let summary = pipeline.handle(event, std::time::Instant::now() + budget).await?;
        for line in icestream::services::metrics::emf_lines(&summary) {
            eprintln!("{line}");
        }
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(())
}
