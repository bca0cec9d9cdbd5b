//! `icestream`: the command line for people. Every command that touches tables runs the same
//! library code as the Lambda functions.

mod committer;
mod demo;
mod maintain;

use std::time::Duration;

use anyhow::{Context, Result, bail};
use icestream::config::{KNOBS, knobs_markdown};
use icestream::generate::{GENERATOR_OPTIONS, GeneratorOptions, generate};
use icestream::{Config, IngestPipeline};

const USAGE: &str = "usage: icestream <command> [key=value ...]

commands:
  ingest EVENT.json   run the ingest function's code on one MSK event file; prints a one-line JSON summary
  report TABLE        snapshots, files, rows and offset watermarks of a table
  gen-event           write a synthetic MSK event (see `icestream help gen-event`)
  maintain [action=compact|rewrite-manifests|expire|remove-orphans|report] [table=NAME] [dry-run=true]
                      run the maintenance function's code; prints the report as JSON
  committer EVENT.json|poll [max_messages=N] [visibility_timeout_s=N]
                      run the committer function's code on an SQS event file, or on one batch
                      received from commit_queue_url (acknowledging what it committed); prints JSON
  demo                generate an event, ingest it, report, and read a few aggregates back
  help [gen-event]    the configuration knobs (or the generator's options)

Configuration comes from ICESTREAM_* environment variables, then key=value arguments.";

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("icestream: {e:#}");
        std::process::exit(2);
    }
}

async fn run() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        bail!("{USAGE}");
    }
    let command = args.remove(0);
    match command.as_str() {
        "ingest" => {
            let (file, rest) = split_first(args, "ingest needs an event file")?;
            let config = Config::from_env_and_args(&rest)?;
            icestream::logging::init(&config.log_format);
            let json = std::fs::read(&file).with_context(|| format!("reading {file}"))?;
            let budget = Duration::from_millis(config.commit_timeout_ms);
            let pipeline = IngestPipeline::new(config).await?;
            let summary = pipeline.handle_json(&json, std::time::Instant::now() + budget).await?;
            eprintln!("{}", icestream::metrics::emf_line("ingest", &summary));
            println!("{}", serde_json::to_string(&summary)?);
        }
        "report" => {
            let (table, rest) = split_first(args, "report needs a table name")?;
            let config = Config::from_env_and_args(&rest)?;
            icestream::logging::init(&config.log_format);
            let catalogs = icestream::catalog::Catalogs::connect(&config).await?;
            let table = catalogs
                .catalog()
                .load_table(&catalogs.ident(&table))
                .await
                .with_context(|| format!("table {}.{table}", config.namespace))?;
            let mut report = icestream::report::report(&table).await?;
            report.managed_maintenance = catalogs.managed_maintenance(table.identifier().name()).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
        }
        "gen-event" => {
            let opts = GeneratorOptions::from_args(&args)?;
            let generated = generate(&opts)?;
            let text = generated.event.to_string();
            let expectation = serde_json::to_string(&generated.expectation)?;
            if opts.out == "-" {
                println!("{text}");
                eprintln!("{expectation}");
            } else {
                std::fs::write(&opts.out, text).with_context(|| format!("writing {}", opts.out))?;
                println!("{expectation}");
            }
        }
        "maintain" => maintain::run(args).await?,
        "committer" => committer::run(args).await?,
        "demo" => demo::run(args).await?,
        "help" | "--help" | "-h" => match args.first().map(String::as_str) {
            Some("gen-event") => print!("{}", knobs_markdown(GENERATOR_OPTIONS)),
            _ => {
                println!("{USAGE}\n");
                print!("{}", knobs_markdown(KNOBS));
            }
        },
        other => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
    Ok(())
}

fn split_first(mut args: Vec<String>, missing: &str) -> Result<(String, Vec<String>)> {
    if args.is_empty() || args[0].contains('=') {
        bail!("{missing}\n\n{USAGE}");
    }
    let first = args.remove(0);
    Ok((first, args))
}
