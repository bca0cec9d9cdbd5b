//! `icestream report TABLE [key=value ...]`: snapshots, files, rows and offset watermarks of a
//! table ([`icestream::report`]), as JSON.

use anyhow::Result;
use icestream::Config;

use crate::cli::{ConfigOnly, Options};

pub async fn run(table: &str, options: Options<ConfigOnly>) -> Result<()> {
    let mut config = Config::from_env_and_args(&options.words)?;
    icestream::logging::init(&config.log_format);
    if config.pipelines.is_some() {
        config.namespace = icestream::pipeline::PipelineSet::from_config(&config).await?.namespace;
    }
    let catalogs = icestream::catalog::Catalogs::connect_read_only(&config).await?;
    let table = catalogs.load(&catalogs.ident(table)).await?;
    let mut report = icestream::report::report(&table).await?;
    report.managed_maintenance = catalogs.managed_maintenance(table.identifier().name()).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
