//! `icestream`: the command line for people. Every command that touches tables runs the same
//! library code as the Lambda functions.

mod audit;
mod committer;
mod dead_letters;
mod demo;
mod maintain;
mod pipelines;
mod recover;
mod status;

use std::time::Duration;

use anyhow::{Context, Result, bail};
use icestream::config::{KNOBS, knobs_markdown};
use icestream::generate::{GENERATOR_OPTIONS, GeneratorOptions, generate};
use icestream::cdc::CdcPipeline;
use icestream::{Config, IngestPipeline};

const USAGE: &str = "usage: icestream <command> [key=value ...]

commands:
  ingest EVENT.json [EVENT.json ...]   run the ingest function's code on MSK event files in order, as one warm
                      function instance would (clients and caches built once); prints a one-line JSON summary each
  cdc EVENT.json      run the cdc function's code on one MSK event file (changelog + guarded mirror); prints a JSON summary
  cdc-rebuild [TABLE] recompute an upsert table (TABLE, with pipelines=) or the accounts mirror from its changelog in one commit; prints a JSON report
  pipelines check FILE [output=text|json]
                      validate a pipeline file; print each pipeline's Iceberg schema (field ids),
                      partition spec and topics
  pipelines tables FILE
                      every table the file implies (dead-letter and changelog tables too) as JSON,
                      offline: what a deployment grants, schedules and alarms
  report TABLE        snapshots, files, rows and offset watermarks of a table
  audit TABLE [bootstrap=HOST:PORT]
                      prove exactly-once from the table: no offset twice across the table and its
                      dead letters, rows under their watermarks, gaps listed (explained by the
                      broker with bootstrap=); prints the verdict and JSON; exits 1 on a failure
  status [output=text|json]
                      per pipeline table: last commit, freshness, rows and files in the last hour,
                      small files waiting for compaction, dead letters in the last hour, pending
                      queued commit requests
  dead-letters replay TABLE [since=TIME|AGE] [reason=TEXT] [dry-run=true]
                      decode the table's dead letters again with the current pipeline and append
                      those that now decode, once (marked, never deleted); prints JSON
  recover s3://BUCKET/PREFIX|DIR [dry-run=true]
                      ingest the batches a Kafka mapping discarded to its S3 on-failure destination
                      into their tables, below the watermark, once (marked replayed for the audit); prints JSON
  gen-event           write a synthetic MSK event (see `icestream help gen-event`)
  maintain [action=purge-tombstones|compact|rewrite-manifests|expire|remove-orphans|replay-dead-letters|audit|report]
                      [table=NAME] [dry-run=true] [since=TIME|AGE] [reason=TEXT]
                      run the maintenance function's code; prints the report as JSON
  committer EVENT.json|poll [max_messages=N] [visibility_timeout_s=N]
                      run the committer function's code on an SQS event file, or on one batch
                      received from commit_queue_url (acknowledging what it committed); prints JSON
  demo                generate an event, ingest it, report, and read a few aggregates back
  produce             telemetry (or domain=cdc changes) into a Kafka topic (see `icestream help produce`)
  simulate-cdc        bank-account changes (I/U/D, hot keys) into a Kafka topic: produce with domain=cdc
  esm                 the local event source mapping: Kafka topic -> batches -> function (see `icestream help esm`)
  contract            what each Lambda function needs from its deployment, as JSON: knobs read, AWS
                      actions called (per resource, catalog and commit mode), metrics emitted
  help [gen-event|produce|simulate-cdc|esm]  the configuration knobs (or a command's options)

Configuration comes from ICESTREAM_* environment variables, then key=value arguments.";

#[tokio::main]
async fn main() {
    // Rust ignores SIGPIPE, so a write to a closed pipe (`icestream audit ... | head -1`) is an
    // error and `println!` panics on it. A command ends quietly instead, as `cat` does. Not the
    // long-running `esm`, whose writes to a lost peer must stay errors it handles. (Sockets are
    // unaffected: Rust sends with MSG_NOSIGNAL.)
    if std::env::args().nth(1).as_deref() != Some("esm") {
        // SAFETY: sets the process's disposition for one signal; no handler of ours runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
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
            let (file, mut rest) = split_first(args, "ingest needs an event file")?;
            let more = rest.iter().take_while(|a| !a.contains('=')).count();
            let files: Vec<String> = std::iter::once(file).chain(rest.drain(..more)).collect();
            let config = Config::from_env_and_args(&rest)?;
            icestream::logging::init(&config.log_format);
            let budget = Duration::from_millis(config.commit_timeout_ms);
            // Every event is read and routed before the pipeline creates a table: a file that is
            // not an event, or a topic no pipeline claims, fails with nothing created.
            let set = icestream::pipeline::PipelineSet::from_config(&config).await?;
            for file in &files {
                let event = icestream::event::parse_event(&std::fs::read(file).with_context(|| format!("reading {file}"))?)?;
                for tp in event.partitions.keys() {
                    set.check_route(&tp.topic)?;
                }
            }
            let pipeline = IngestPipeline::new(config).await?;
            for file in files {
                let json = std::fs::read(&file).with_context(|| format!("reading {file}"))?;
                // The parsed event owns what it needs: the file's bytes go before the work starts.
                let event = icestream::event::parse_event(&json)?;
                drop(json);
                let summary = pipeline.handle(event, std::time::Instant::now() + budget).await?;
                eprintln!("{}", icestream::metrics::emf_line("ingest", &summary));
                for line in icestream::metrics::table_emf_lines("ingest", &summary) {
                    eprintln!("{line}");
                }
                println!("{}", serde_json::to_string(&summary)?);
            }
        }
        "cdc" => {
            let (file, rest) = split_first(args, "cdc needs an event file")?;
            let config = Config::from_env_and_args(&rest)?;
            icestream::logging::init(&config.log_format);
            let json = std::fs::read(&file).with_context(|| format!("reading {file}"))?;
            let budget = Duration::from_millis(config.commit_timeout_ms);
            let pipeline = CdcPipeline::new(config).await?;
            let summary = pipeline.handle_json(&json, std::time::Instant::now() + budget).await?;
            eprintln!("{}", icestream::metrics::emf_line_of("cdc", &summary.metrics()));
            println!("{}", serde_json::to_string(&summary)?);
        }
        "cdc-rebuild" => {
            // `cdc-rebuild TABLE pipelines=…`: an upsert pipeline's table; without a table, the
            // accounts mirror of the `cdc` function.
            let (table, rest) = match args.first() {
                Some(first) if !first.contains('=') => (Some(first.clone()), args[1..].to_vec()),
                _ => (None, args),
            };
            let config = Config::from_env_and_args(&rest)?;
            icestream::logging::init(&config.log_format);
            let deadline = std::time::Instant::now() + Duration::from_millis(config.commit_timeout_ms);
            let report = match table {
                Some(table) => {
                    let set = icestream::pipeline::PipelineSet::from_config(&config).await?;
                    let pipeline = set.pipelines.iter().find(|p| p.table == table).with_context(|| format!("no pipeline writes table {table:?}"))?;
                    let mut config = config.clone();
                    config.namespace = set.namespace.clone();
                    let catalogs = icestream::catalog::Catalogs::connect(&config).await?;
                    icestream::cdc::rebuild_keyed::rebuild(&catalogs, pipeline, &config.compression, config.target_file_size_bytes, deadline).await?
                }
                None => icestream::cdc::rebuild::rebuild(&CdcPipeline::new(config).await?, deadline).await?,
            };
            println!("{}", serde_json::to_string(&report)?);
        }
        "report" => {
            let (table, rest) = split_first(args, "report needs a table name")?;
            let mut config = Config::from_env_and_args(&rest)?;
            icestream::logging::init(&config.log_format);
            if config.pipelines.is_some() {
                config.namespace = icestream::pipeline::PipelineSet::from_config(&config).await?.namespace;
            }
            let catalogs = icestream::catalog::Catalogs::connect_read_only(&config).await?;
            let table = catalogs.load(&catalogs.ident(&table)).await?;
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
        "audit" => audit::run(args).await?,
        "status" => status::run(args).await?,
        "dead-letters" => dead_letters::run(args).await?,
        "recover" => recover::run(args).await?,
        "pipelines" => pipelines::run(args).await?,
        "committer" => committer::run(args).await?,
        "demo" => demo::run(args).await?,
        #[cfg(not(feature = "kafka"))]
        "produce" | "simulate-cdc" | "esm" => return Err(icestream_tools::not_built(&format!("`icestream {command}`"), "kafka")),
        #[cfg(feature = "kafka")]
        "produce" | "simulate-cdc" => {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = stop.clone();
            tokio::spawn(async move {
                icestream_tools::kafka::stop_signal().await;
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            let cdc = command == "simulate-cdc";
            let (stats, expectation) = tokio::task::spawn_blocking(move || {
                if cdc { icestream_tools::produce::simulate_cdc(&args, &stop) } else { icestream_tools::produce::produce(&args, &stop) }
            })
            .await??;
            println!("{}", stats.throughput_line);
            println!("{}", serde_json::to_string(&expectation)?);
        }
        #[cfg(feature = "kafka")]
        "esm" => icestream_tools::esm::command::run(&args).await?,
        "contract" => println!("{}", serde_json::to_string_pretty(&icestream::deployment::contract_json(icestream::metrics::emitted_metrics()))?),
        "help" | "--help" | "-h" => match args.first().map(String::as_str) {
            Some("gen-event") => GENERATOR_OPTIONS.iter().for_each(|list| print!("{}", knobs_markdown(list))),
            #[cfg(not(feature = "kafka"))]
            Some(c @ ("produce" | "simulate-cdc" | "esm")) => return Err(icestream_tools::not_built(&format!("`icestream {c}`"), "kafka")),
            #[cfg(feature = "kafka")]
            Some("produce" | "simulate-cdc") => icestream_tools::produce::PRODUCE_OPTIONS.iter().for_each(|list| print!("{}", knobs_markdown(list))),
            #[cfg(feature = "kafka")]
            Some("esm") => print!("{}\nThe function's own knobs (below) pass through with invoke=inprocess.\n\n{}", knobs_markdown(icestream_tools::esm::ESM_OPTIONS), knobs_markdown(KNOBS)),
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
