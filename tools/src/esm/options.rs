//! The knobs of `icestream esm`, validated like every other command option. Words that are
//! not poller knobs are the function's own configuration and pass through to it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use icestream::model::config::{Allowed, KNOBS, Knob, Settings};

use super::batch::MAX_BATCH_SIZE;
use super::function::invoke_url;
use crate::kafka::BOOTSTRAP;

/// Options of the local event source mapping.
pub const ESM_OPTIONS: &[Knob] = &[
    BOOTSTRAP,
    Knob {
        key: "topic",
        default: "vehicle-telemetry",
        allowed: Allowed::Text,
        help: "Topic to consume, or several comma-separated (one event then carries them all)",
    },
    Knob {
        key: "group",
        default: "icestream-esm",
        allowed: Allowed::Text,
        help: "Consumer group (the mapping's UUID plays this role on AWS)",
    },
    Knob {
        key: "batch_size",
        default: "100",
        allowed: Allowed::Integer { min: 1, max: MAX_BATCH_SIZE as i64 },
        help: "Most records per invocation (MSK default 100)",
    },
    Knob {
        key: "batching_window_ms",
        default: "500",
        allowed: Allowed::Integer { min: 0, max: 300_000 },
        help: "Longest wait to fill a batch after its first record (MSK default 500 ms)",
    },
    Knob {
        key: "invoke",
        default: "inprocess",
        allowed: Allowed::Text,
        help: "`inprocess` (the library pipeline in this process) or the URL of a Lambda invoke API, e.g. http://127.0.0.1:9000 (cargo lambda watch)",
    },
    Knob {
        key: "drain",
        default: "false",
        allowed: Allowed::OneOf(&["true", "false"]),
        help: "Consume what the topic holds, then exit 0 once every partition is caught up; false = run until stopped",
    },
    Knob {
        key: "retries",
        default: "2",
        allowed: Allowed::Integer { min: 0, max: 10_000 },
        help: "Retries of a failed batch (whole batch) before it goes to the on-failure directory",
    },
    Knob {
        key: "on_failure_dir",
        default: "./esm-failures",
        allowed: Allowed::Text,
        help: "On-failure destination: one JSON file per discarded batch, as the mapping writes to S3",
    },
    Knob {
        key: "session_timeout_ms",
        default: "6000",
        allowed: Allowed::Integer { min: 1_000, max: 3_600_000 },
        help: "How long the broker keeps the poller in its group without a heartbeat (sent every 200 ms). Apache Kafka and Redpanda refuse less than their group.min.session.timeout.ms, 6000 by default; Tansu answers a new group's join after half of it in whole seconds, so the local scripts use 2000 there (a 1 s join)",
    },
];

/// Where batches go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invoke {
    InProcess,
    /// The full invoke URL.
    Http(String),
}

/// Parsed poller options.
#[derive(Debug, Clone)]
pub struct EsmOptions {
    pub bootstrap: String,
    pub topic: String,
    pub group: String,
    pub batch_size: usize,
    pub batching_window: Duration,
    pub invoke: Invoke,
    pub drain: bool,
    pub retries: u32,
    pub on_failure_dir: PathBuf,
    pub session_timeout: Duration,
}

impl EsmOptions {
    /// Split `key=value` words into the poller's options and the function's configuration
    /// words (validated by the function's own knob list when it is built).
    pub fn from_args(args: &[String]) -> Result<(Self, Vec<String>)> {
        let mut settings = Settings::over(ESM_OPTIONS);
        let mut function_args = Vec::new();
        for arg in args {
            let key = arg.split_once('=').map_or(arg.as_str(), |(k, _)| k.trim());
            if ESM_OPTIONS.iter().any(|k| k.key == key) {
                settings.apply_args([arg])?;
            } else if KNOBS.iter().any(|k| k.key == key) {
                function_args.push(arg.clone());
            } else {
                let mut known: Vec<_> = ESM_OPTIONS.iter().chain(KNOBS).map(|k| k.key).collect();
                known.sort_unstable();
                bail!("unknown key `{key}` for esm: known keys are {} (the poller's and the function's)", known.join(", "));
            }
        }
        let invoke = match settings.get("invoke") {
            "inprocess" => Invoke::InProcess,
            url if url.starts_with("http://") && url.len() > "http://".len() => Invoke::Http(invoke_url(url, "ingest")),
            other => bail!(
                "bad value {other:?} for `invoke`: allowed is inprocess or the http:// URL of a Lambda invoke API (e.g. http://127.0.0.1:9000)"
            ),
        };
        if let (Invoke::Http(url), Some(first)) = (&invoke, function_args.first()) {
            bail!(
                "{first:?} is the function's configuration, which the poller cannot pass over {url}: \
                 set it in the function's environment instead (ICESTREAM_<KEY>, e.g. `cargo lambda watch --env-var`)"
            );
        }
        let opts = Self {
            bootstrap: settings.get("bootstrap").to_string(),
            topic: settings.get("topic").to_string(),
            group: settings.get("group").to_string(),
            batch_size: settings.parse("batch_size")?,
            batching_window: Duration::from_millis(settings.parse("batching_window_ms")?),
            invoke,
            drain: settings.get("drain") == "true",
            retries: settings.parse("retries")?,
            on_failure_dir: PathBuf::from(settings.get("on_failure_dir")),
            session_timeout: Duration::from_millis(settings.parse("session_timeout_ms")?),
        };
        Ok((opts, function_args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn poller_and_function_words_are_split_and_typed() {
        let (o, f) = EsmOptions::from_args(&args(&[
            "bootstrap=127.0.0.1:1",
            "topic=t",
            "group=g",
            "batch_size=10000",
            "batching_window_ms=0",
            "drain=true",
            "retries=0",
            "session_timeout_ms=2000",
            "warehouse=/tmp/w",
            "source=json",
        ]))
        .unwrap();
        assert_eq!(o.session_timeout, Duration::from_secs(2));
        assert_eq!((o.bootstrap.as_str(), o.topic.as_str(), o.group.as_str()), ("127.0.0.1:1", "t", "g"));
        assert_eq!((o.batch_size, o.batching_window, o.drain, o.retries), (10_000, Duration::ZERO, true, 0));
        assert_eq!(o.invoke, Invoke::InProcess);
        assert_eq!(f, ["warehouse=/tmp/w", "source=json"]);
    }

    #[test]
    fn bad_values_name_the_key_and_what_is_allowed() {
        for (word, needles) in [
            ("batch_size=10001", &["`batch_size`", "1 to 10000"][..]),
            ("drain=yes", &["`drain`", "true|false"]),
            ("session_timeout_ms=999", &["`session_timeout_ms`", "1000 to 3600000"]),
            ("invoke=ftp://x", &["`invoke`", "inprocess", "http://"]),
            ("sauce=1", &["unknown key `sauce`", "batch_size", "warehouse"]),
        ] {
            let err = EsmOptions::from_args(&args(&[word])).unwrap_err().to_string();
            for n in needles {
                assert!(err.contains(n), "{word}: {err}");
            }
        }
    }

    #[test]
    fn over_http_the_function_is_configured_in_its_own_environment() {
        let (o, _) = EsmOptions::from_args(&args(&["invoke=http://127.0.0.1:9000"])).unwrap();
        assert_eq!(o.invoke, Invoke::Http("http://127.0.0.1:9000/2015-03-31/functions/ingest/invocations".into()));
        assert_eq!(o.topic, "vehicle-telemetry");
        let err = EsmOptions::from_args(&args(&["invoke=http://127.0.0.1:9000", "warehouse=/w"])).unwrap_err().to_string();
        assert!(err.contains("warehouse") && err.contains("environment"), "{err}");
    }
}
