//! Logs go to standard error (the CLI keeps standard output for its one-line summary), as text
//! or JSON per the `log_format` knob; the level comes from `RUST_LOG` (default `info`).

use tracing_subscriber::EnvFilter;

/// Install the global subscriber once; later calls are no-ops.
pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().with_current_span(false).try_init()
    } else {
        builder.with_target(false).try_init()
    };
}

/// An `Instant` deadline from a Lambda context deadline (epoch milliseconds), keeping
/// `margin_ms` back to reply in time.
pub fn deadline_from_epoch_ms(deadline_ms: u64, margin_ms: u64) -> std::time::Instant {
    let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let left = deadline_ms.saturating_sub(now_ms).saturating_sub(margin_ms);
    std::time::Instant::now() + std::time::Duration::from_millis(left)
}
