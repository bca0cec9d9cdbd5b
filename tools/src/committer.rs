//! `icestream committer EVENT.json | poll [max_messages=N] [visibility_timeout_s=N] [key=value ...]`:
//! the committer function's code, in-process, on an SQS event file or on one batch received
//! from `commit_queue_url` the way the Lambda SQS mapping does (receive, commit, then delete
//! every message not reported as a batch item failure; deferred ones come again after
//! `commit_gap_retry_s`). Prints the batch report as JSON.

use anyhow::{Context, Result, bail};
use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::engine::queue::sqs::CommitQueue;
use icestream::engine::queue::{Message, from_sqs_event};
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::services::queued::{batch, retry_deferred_soon};

/// Command options (not configuration knobs).
const COMMITTER_OPTIONS: &[Knob] = &[
    Knob {
        key: "max_messages",
        default: "100",
        allowed: Allowed::Integer { min: 1, max: 10_000 },
        help: "poll: most requests in the batch (the mapping's batch size)",
    },
    Knob {
        key: "visibility_timeout_s",
        default: "300",
        allowed: Allowed::Integer { min: 0, max: 43_200 },
        help: "poll: how long received requests stay hidden; a crashed or failed batch comes again after it",
    },
];

/// The command's option list for the command line (`crate::cli`).
pub struct Committer;

impl crate::cli::OptionList for Committer {
    const LISTS: &'static [&'static [Knob]] = &[COMMITTER_OPTIONS];
}

pub async fn run(source: String, args: Vec<String>) -> Result<()> {
    let (settings, knobs) = Settings::split_options(COMMITTER_OPTIONS, &args)?;
    let config = Config::from_env_and_args(&knobs)?;
    icestream::base::logging::init(&config.log_format);
    let catalogs = Catalogs::connect(&config).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(config.commit_timeout_ms);

    let (queue, messages): (Option<CommitQueue>, Vec<Message>) = if source == "poll" {
        let url = match config.commit_queue_url() {
            Some(url) => url.to_string(),
            None => bail!("committer poll needs `commit_queue_url` (ICESTREAM_COMMIT_QUEUE_URL)"),
        };
        let queue = CommitQueue::connect(&url).await;
        let messages = queue.receive(settings.parse("max_messages")?, settings.parse("visibility_timeout_s")?).await?;
        (Some(queue), messages)
    } else {
        let json = std::fs::read(&source).with_context(|| format!("reading {source}"))?;
        let event = serde_json::from_slice(&json).with_context(|| format!("{source} is not an SQS event"))?;
        (None, from_sqs_event(event)?)
    };

    let report = batch::commit_batch(&catalogs, &config, &messages, deadline).await;
    if let Some(queue) = queue {
        let done: Vec<&Message> = messages.iter().filter(|m| !report.batch_item_failures.contains(&m.id)).collect();
        queue.delete(&done).await?;
        retry_deferred_soon(&queue, &config, &messages, &report).await;
    }
    for line in icestream::services::metrics::emf_lines(&report) {
        eprintln!("{line}");
    }
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
