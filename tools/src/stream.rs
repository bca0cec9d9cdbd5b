//! The Kafka commands: `produce`, `simulate-cdc` and `esm` (the local event source mapping).
//! A build without the `kafka` feature keeps their names and says which build has them.

use anyhow::Result;
use icestream::model::config::Knob;

use crate::cli::{OptionList, Options};

pub struct Produce;

impl OptionList for Produce {
    #[cfg(feature = "kafka")]
    const LISTS: &'static [&'static [Knob]] = icestream_tools::produce::PRODUCE_OPTIONS;
    #[cfg(not(feature = "kafka"))]
    const LISTS: &'static [&'static [Knob]] = &[];
    const CONFIG: bool = false;
}

pub struct Esm;

impl OptionList for Esm {
    #[cfg(feature = "kafka")]
    const LISTS: &'static [&'static [Knob]] = &[icestream_tools::esm::ESM_OPTIONS];
    #[cfg(not(feature = "kafka"))]
    const LISTS: &'static [&'static [Knob]] = &[];
}

/// `produce`, or `simulate-cdc` (`cdc`): prints the throughput line, then what was sent as JSON.
#[cfg(feature = "kafka")]
pub async fn produce(options: Options<Produce>, cdc: bool) -> Result<()> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        icestream_tools::kafka::stop_signal().await;
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let args = options.words;
    let (stats, expectation) = tokio::task::spawn_blocking(move || {
        if cdc { icestream_tools::produce::simulate_cdc(&args, &stop) } else { icestream_tools::produce::produce(&args, &stop) }
    })
    .await??;
    println!("{}", stats.throughput_line);
    println!("{}", serde_json::to_string(&expectation)?);
    Ok(())
}

#[cfg(not(feature = "kafka"))]
pub async fn produce(_: Options<Produce>, cdc: bool) -> Result<()> {
    Err(icestream_tools::not_built(if cdc { "`icestream simulate-cdc`" } else { "`icestream produce`" }, "kafka"))
}

#[cfg(feature = "kafka")]
pub async fn esm(options: Options<Esm>) -> Result<()> {
    icestream_tools::esm::command::run(&options.words).await
}

#[cfg(not(feature = "kafka"))]
pub async fn esm(_: Options<Esm>) -> Result<()> {
    Err(icestream_tools::not_built("`icestream esm`", "kafka"))
}
