//! The `icestream esm` command: options, the function to invoke, a run until stopped or
//! drained, and the final summary.

use std::time::Instant;

use anyhow::Result;
use icestream::{Config, IngestPipeline};

use super::batch::Batch;
use super::function::{Function, HttpFunction, InProcessIngest};
use super::{EsmOptions, Invoke, Poller};
use crate::kafka::{stop_signal, throughput_line};

/// The function a command-line poller invokes.
pub enum AnyFunction {
    Ingest(InProcessIngest),
    Http(HttpFunction),
}

impl Function for AnyFunction {
    async fn invoke(&self, event: &[u8]) -> Result<serde_json::Value> {
        match self {
            AnyFunction::Ingest(f) => f.invoke(event).await,
            AnyFunction::Http(f) => f.invoke(event).await,
        }
    }

    async fn invoke_batch(&self, batch: &Batch) -> Result<serde_json::Value> {
        match self {
            AnyFunction::Ingest(f) => f.invoke_batch(batch).await,
            AnyFunction::Http(f) => f.invoke_batch(batch).await,
        }
    }
}

/// Build the function the options name; `function_args` configure an in-process one.
pub async fn function_for(opts: &EsmOptions, function_args: &[String]) -> Result<AnyFunction> {
    Ok(match &opts.invoke {
        Invoke::Http(url) => {
            icestream::base::logging::init("text");
            AnyFunction::Http(HttpFunction::new(url.clone()))
        }
        Invoke::InProcess => {
            let config = Config::from_env_and_args(function_args)?;
            icestream::base::logging::init(&config.log_format);
            AnyFunction::Ingest(InProcessIngest::new(IngestPipeline::new(config).await?))
        }
    })
}

/// `icestream esm ...`: prints a throughput line, then the run's statistics as one JSON line.
pub async fn run(args: &[String]) -> Result<()> {
    let (opts, function_args) = EsmOptions::from_args(args)?;
    let function = function_for(&opts, &function_args).await?;
    let target = match &opts.invoke {
        Invoke::InProcess => "ingest in-process".to_string(),
        Invoke::Http(url) => url.clone(),
    };
    eprintln!(
        "esm: consuming {} at {} as group {}, batches of up to {} records / {} ms, invoking {target}{}",
        opts.topic,
        opts.bootstrap,
        opts.group,
        opts.batch_size,
        opts.batching_window.as_millis(),
        if opts.drain { " until caught up" } else { " until stopped" }
    );
    let poller = Poller::connect(opts)?;
    let started = Instant::now();
    let stats = poller.run(&function, stop_signal()).await?;
    println!("{}", poller.phases_line());
    println!("{}", throughput_line("invoked", stats.records, stats.bytes, started));
    println!("{}", serde_json::to_string(&stats)?);
    Ok(())
}
