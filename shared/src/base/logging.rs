//! Logs go to standard error (the CLI keeps standard output for its one-line summary), as text
//! or JSON per the `log_format` knob; the level comes from `RUST_LOG` (default `info`).
//!
//! JSON lines carry the fields of every enclosing span under `spans`: the Lambda runtime's
//! invocation span (`requestId`, `xrayTraceId`), and for everything about one pipeline's share
//! of a batch, ingest's `batch` span (`table`, `offsets` = `topic-partition:first-last,...`).
//! A line's own fields sit at the top level with `message`, so CloudWatch Logs Insights reads
//! `spans.0.requestId` and `message` alike.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Install the global subscriber once; later calls are no-ops.
pub fn init(format: &str) {
    let _ = if format == "json" {
        tracing::subscriber::set_global_default(json_subscriber(std::io::stderr)).map_err(|e| e.to_string())
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter())
            .with_writer(std::io::stderr)
            .with_target(false)
            .try_init()
            .map_err(|e| e.to_string())
    };
}

fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The JSON subscriber of `log_format=json`, writing to `writer` (tests capture it).
pub fn json_subscriber<W>(writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(writer)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(true)
        .finish()
}

/// Lambda-Runtime-Deadline-Ms values below this (2001-09-09 as epoch ms) are not epoch times:
/// `cargo lambda watch` sends the function timeout itself (e.g. 600000), which read as an epoch
/// would leave no time at all (maintenance would stop before its first action, commits would
/// never retry).
const EARLIEST_EPOCH_DEADLINE_MS: u64 = 1_000_000_000_000;

/// An `Instant` deadline from a Lambda context deadline (epoch milliseconds, or a timeout in
/// milliseconds from a local emulator), keeping `margin_ms` back to reply in time.
pub fn deadline_from_epoch_ms(deadline_ms: u64, margin_ms: u64) -> std::time::Instant {
    let left = if deadline_ms < EARLIEST_EPOCH_DEADLINE_MS {
        deadline_ms
    } else {
        deadline_ms.saturating_sub(chrono::Utc::now().timestamp_millis().max(0) as u64)
    };
    std::time::Instant::now() + std::time::Duration::from_millis(left.saturating_sub(margin_ms))
}

#[cfg(test)]
mod tests {
    use super::deadline_from_epoch_ms;
    use std::time::{Duration, Instant};

    #[test]
    fn deadline_is_epoch_ms_in_lambda_and_a_timeout_from_cargo_lambda_watch() {
        let now_ms = chrono::Utc::now().timestamp_millis() as u64;
        let left = |d: Instant| d.saturating_duration_since(Instant::now());
        let epoch = left(deadline_from_epoch_ms(now_ms + 60_000, 5_000));
        assert!(epoch > Duration::from_secs(50) && epoch <= Duration::from_secs(55), "{epoch:?}");
        let emulator = left(deadline_from_epoch_ms(600_000, 5_000));
        assert!(emulator > Duration::from_secs(590) && emulator <= Duration::from_secs(595), "{emulator:?}");
        assert_eq!(left(deadline_from_epoch_ms(now_ms - 1_000, 5_000)), Duration::ZERO);
    }
}
