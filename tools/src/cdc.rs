//! `icestream cdc EVENT.json` (the cdc function's code on one MSK event file: changelog and
//! guarded mirror) and `icestream cdc-rebuild [TABLE]` (an upsert table, or the accounts
//! mirror, recomputed from its changelog in one commit). Both print JSON.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use icestream::Config;
use icestream::cdc::CdcPipeline;

use crate::cli::{ConfigOnly, OptionList, Options};

pub async fn run(file: &str, options: Options<ConfigOnly>) -> Result<()> {
    let config = Config::from_env_and_args(&options.words)?;
    icestream::base::logging::init(&config.log_format);
    let json = std::fs::read(file).with_context(|| format!("reading {file}"))?;
    let budget = Duration::from_millis(config.commit_timeout_ms);
    let pipeline = CdcPipeline::new(config).await?;
    let summary = pipeline.handle_json(&json, std::time::Instant::now() + budget).await?;
    eprintln!("{}", icestream::services::metrics::emf_line_of("cdc", &summary.metrics()));
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

pub struct Rebuild;

impl OptionList for Rebuild {
    const LISTS: &'static [&'static [icestream::model::config::Knob]] = &[];
    const LEADING: bool = true;
    const WORDS: &'static str = "TABLE KEY=VALUE";
}

/// `cdc-rebuild TABLE pipelines=…`: an upsert pipeline's table; without a table, the accounts
/// mirror of the `cdc` function.
pub async fn rebuild(options: Options<Rebuild>) -> Result<()> {
    let (mut tables, rest) = crate::cli::leading(options.words);
    if tables.len() > 1 {
        bail!("cdc-rebuild takes one table, got {}", tables.join(" "));
    }
    let config = Config::from_env_and_args(&rest)?;
    icestream::base::logging::init(&config.log_format);
    let deadline = std::time::Instant::now() + Duration::from_millis(config.commit_timeout_ms);
    let report = match tables.pop() {
        Some(table) => {
            let set = icestream::model::pipeline::PipelineSet::from_config(&config).await?;
            let pipeline = set.pipelines.iter().find(|p| p.table == table).with_context(|| format!("no pipeline writes table {table:?}"))?;
            let mut config = config.clone();
            config.namespace = set.namespace.clone();
            let catalogs = icestream::engine::catalog::Catalogs::connect(&config).await?;
            icestream::cdc::rebuild_keyed::rebuild(&catalogs, pipeline, &config.compression, config.target_file_size_bytes, deadline).await?
        }
        None => icestream::cdc::rebuild::rebuild(&CdcPipeline::new(config).await?, deadline).await?,
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
