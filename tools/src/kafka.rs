//! What the producers and the poller share about talking to Kafka: the bootstrap option and
//! the client settings that make a local broker (Tansu or apache/kafka) behave.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use icestream::model::config::{Allowed, Knob};
use indicatif::{ProgressBar, ProgressStyle};
use rdkafka::ClientConfig;

/// Where the broker is: shared by every Kafka command.
pub const BOOTSTRAP: Knob =
    Knob { key: "bootstrap", default: "127.0.0.1:9092", allowed: Allowed::Text, help: "Kafka bootstrap servers, HOST:PORT[,HOST:PORT...]" };

/// A client configuration for `bootstrap`.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    // librdkafka logs connection refusals at error level; the commands report failures themselves.
    config.set("log_level", "3");
    config
}

/// A progress bar on standard error when it is a terminal (hidden otherwise), counting records.
pub fn progress_bar(total: Option<u64>, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match total {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
                .expect("static template")
                .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner()
            .with_style(ProgressStyle::with_template("{spinner} {msg} {pos} records {per_sec}").expect("static template")),
    };
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// The final throughput line of a command: `<verb> N records (B bytes) in S s: R records/s`.
pub fn throughput_line(verb: &str, records: u64, bytes: u64, started: Instant) -> String {
    let secs = started.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { records as f64 / secs } else { 0.0 };
    format!("{verb} {records} records ({bytes} bytes) in {secs:.2} s: {rate:.0} records/s")
}

/// Resolves on Ctrl-C or SIGTERM (how `make local` stops its children).
pub async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
