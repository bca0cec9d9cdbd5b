//! `icestream cdc-rebuild TABLE pipelines=…`: an upsert pipeline's table recomputed from its
//! changelog in one commit; prints a JSON report. (`icestream cdc`, the removed accounts
//! service, only says what replaced it.)

use std::time::Duration;

use anyhow::{Context, Result, bail};
use icestream::Config;

use crate::cli::{OptionList, Options};

/// What `icestream cdc` says: the accounts feed is an upsert pipeline now.
pub const CDC_IS_GONE: &str = "`icestream cdc` is gone: the accounts feed is an upsert pipeline (the reference file's `accounts`): `icestream ingest EVENT.json pipelines=FILE`";

pub struct Rebuild;

impl OptionList for Rebuild {
    const LISTS: &'static [&'static [icestream::model::config::Knob]] = &[];
    const LEADING: bool = true;
    const WORDS: &'static str = "TABLE KEY=VALUE";
}

pub async fn rebuild(options: Options<Rebuild>) -> Result<()> {
    let (tables, rest) = crate::cli::leading(options.words);
    let [table] = tables.as_slice() else {
        bail!("cdc-rebuild takes the table of one upsert pipeline (and pipelines=FILE), got {:?}", tables.join(" "));
    };
    let mut config = Config::from_env_and_args(&rest)?;
    icestream::base::logging::init(&config.log_format);
    let deadline = std::time::Instant::now() + Duration::from_millis(config.commit_timeout_ms);
    let set = icestream::model::pipeline::PipelineSet::from_config(&config).await?;
    let pipeline = set.pipelines.iter().find(|p| &p.table == table).with_context(|| format!("no pipeline writes table {table:?}"))?;
    config.namespace = set.namespace.clone();
    let catalogs = icestream::engine::catalog::Catalogs::connect(&config).await?;
    let report =
        icestream::modes::upsert::rebuild::rebuild(&catalogs, pipeline, &config.compression, config.target_file_size_bytes, deadline)
            .await?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
