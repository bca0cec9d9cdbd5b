//! `icestream demo`: the main job on the embedded default, end to end, in one command.

use std::time::{Duration, Instant};

use anyhow::Result;
use arrow_array::cast::AsArray;
use arrow_array::types::Int32Type;
use futures::TryStreamExt;
use icestream::dev::generate::{GeneratorOptions, generate};
use icestream::{Config, IngestPipeline};

/// The topic of the reference file's accounts pipeline.
const ACCOUNTS_TOPIC: &str = "accounts-cdc";

/// Knobs the demo sets unless told otherwise.
const DEMO_DEFAULTS: &[&str] = &["dedup=batch"];

/// The generator's options and the configuration knobs.
pub struct Demo;

impl crate::cli::OptionList for Demo {
    const LISTS: &'static [&'static [icestream::model::config::Knob]] = icestream::dev::generate::GENERATOR_OPTIONS;
}

pub async fn run(args: Vec<String>) -> Result<()> {
    let (gen_args, config_args): (Vec<String>, Vec<String>) = args.into_iter().partition(|a| {
        a.split_once('=').is_some_and(|(k, _)| {
            icestream::dev::generate::GENERATOR_OPTIONS.iter().flat_map(|l| l.iter()).any(|o| o.key == k) && k != "topic"
        })
    });
    let mut all_config: Vec<String> = DEMO_DEFAULTS.iter().map(|s| s.to_string()).collect();
    all_config.extend(config_args);
    let config = Config::from_env_and_args(&all_config)?;
    icestream::base::logging::init(&config.log_format);
    let mut opts =
        GeneratorOptions::from_args(["records=20000", "corrupt=true", "format=json"].iter().map(|s| s.to_string()).chain(gen_args))?;
    opts.record.source = config.source;
    let generated = generate(&opts)?;
    println!(
        "generated {} records ({} bytes): {}",
        generated.expectation.records,
        generated.expectation.bytes,
        serde_json::to_string(&generated.expectation)?
    );

    let started = Instant::now();
    let pipeline = IngestPipeline::new(config.clone()).await?;
    let json = generated.event.to_string();
    let summary = pipeline.handle_json(json.as_bytes(), Instant::now() + Duration::from_millis(config.commit_timeout_ms)).await?;
    println!("ingested in {:?}: {}", started.elapsed(), serde_json::to_string(&summary)?);

    // The accounts mirror, where the file has it: a DMS change feed through the upsert pipeline.
    if pipeline.pipelines().route(ACCOUNTS_TOPIC).is_ok() {
        let args = ["domain=cdc", "format=dms", "records=5000", "accounts=500"].map(String::from);
        let feed = generate(&GeneratorOptions::from_args(args.into_iter().chain([format!("topic={ACCOUNTS_TOPIC}")]))?)?;
        let started = Instant::now();
        let json = feed.event.to_string();
        let summary = pipeline.handle_json(json.as_bytes(), Instant::now() + Duration::from_millis(config.commit_timeout_ms)).await?;
        println!(
            "\naccounts: {} DMS changes applied in {:?}: {} accounts changed ({} stale), {} changes in the changelog",
            feed.expectation.records,
            started.elapsed(),
            summary.upsert_applied,
            summary.upsert_stale,
            summary.changelog_written
        );
    }

    let catalogs = pipeline.catalogs();
    for name in pipeline.pipelines().tables() {
        let table = catalogs.catalog().load_table(&catalogs.ident(&name)).await?;
        let report = icestream::services::report::report(&table).await?;
        println!(
            "\n{name}: {} rows in {} files, {} partitions, {} snapshots; watermarks {:?}",
            report.records, report.data_files, report.partitions, report.snapshots, report.watermarks
        );
    }

    // A few aggregates of the telemetry table read back through an Iceberg scan.
    let telemetry = &pipeline.pipelines().pipelines[0].table;
    let table = catalogs.catalog().load_table(&catalogs.ident(telemetry)).await?;
    let batches: Vec<_> = table.scan().select(["model", "speed_kmh"]).build()?.to_arrow().await?.try_collect().await?;
    let mut by_model: std::collections::BTreeMap<String, (u64, i64)> = Default::default();
    for b in &batches {
        let models = b.column(0).as_string::<i32>();
        let speeds = b.column(1).as_primitive::<Int32Type>();
        for i in 0..b.num_rows() {
            let e = by_model.entry(models.value(i).to_string()).or_default();
            e.0 += 1;
            e.1 += i64::from(speeds.value(i));
        }
    }
    println!("\nmodel        readings  avg speed km/h");
    for (model, (n, sum)) in by_model {
        println!("{model:<12} {n:>8}  {:>14.1}", sum as f64 / n as f64);
    }
    let warehouse = config.local_warehouse_dir()?;
    println!(
        "\nwarehouse: {} (catalog {}/catalog.db, catalog name `icestream`, namespace `{}`)",
        warehouse.display(),
        warehouse.display(),
        pipeline.pipelines().namespace
    );
    Ok(())
}
