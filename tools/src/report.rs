//! `icestream report TABLE [key=value ...]`: snapshots, files, rows and offset watermarks of a
//! table ([`icestream::services::report`]), as JSON.

use anyhow::Result;
use icestream::Config;

use crate::cli::{ConfigOnly, Options};

pub async fn run(table: &str, options: Options<ConfigOnly>) -> Result<()> {
    let mut config = Config::from_env_and_args(&options.words)?;
    icestream::base::logging::init(&config.log_format);
    if config.pipelines.is_some() {
        config.namespace = icestream::model::pipeline::PipelineSet::from_config(&config).await?.namespace;
    }
    let catalogs = icestream::engine::catalog::Catalogs::connect_read_only(&config).await?;
    let table = catalogs.load(&catalogs.ident(table)).await?;
    let mut report = icestream::services::report::report(&table).await?;
    report.managed_maintenance = catalogs.managed_maintenance(table.identifier().name()).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
