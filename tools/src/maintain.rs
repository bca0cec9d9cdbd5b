//! `icestream maintain [action=..] [table=..] [dry-run=true] [key=value ...]`: the maintenance
//! function's code, in-process, with the report printed as JSON.

use anyhow::Result;
use icestream::Config;
use icestream::engine::catalog::Catalogs;
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::services::maintenance::{MaintenanceRequest, maintain, pipeline_tables};

/// Command options (not configuration knobs).
pub const MAINTAIN_OPTIONS: &[Knob] = &[
    Knob {
        key: "action",
        default: "",
        allowed: Allowed::Text,
        help: "purge-tombstones, compact, upgrade (with format_version=3), rewrite-manifests, expire, remove-orphans, replay-dead-letters, audit or report; comma-separated; none = all but upgrade, replay-dead-letters and audit, in a safe order",
    },
    Knob {
        key: "table",
        default: "",
        allowed: Allowed::Text,
        help: "Table name(s), comma-separated; none = every table of the pipeline file (or of the namespace without one)",
    },
    Knob { key: "dry-run", default: "false", allowed: Allowed::OneOf(&["true", "false"]), help: "Only report what each action would do" },
    Knob {
        key: "since",
        default: "",
        allowed: Allowed::Text,
        help: "replay-dead-letters: only dead letters rejected since this RFC 3339 time or age (90m, 6h, 7d)",
    },
    Knob {
        key: "reason",
        default: "",
        allowed: Allowed::Text,
        help: "replay-dead-letters: only dead letters whose reason contains this text",
    },
];

/// The command's option list for the command line (`crate::cli`).
pub struct Maintain;

impl crate::cli::OptionList for Maintain {
    const LISTS: &'static [&'static [Knob]] = &[MAINTAIN_OPTIONS];
}

fn list(value: &str) -> Vec<String> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

pub async fn run(args: Vec<String>) -> Result<()> {
    let (settings, knobs) = Settings::split_options(MAINTAIN_OPTIONS, &args)?;
    let mut config = Config::from_env_and_args(&knobs)?;
    icestream::base::logging::init(&config.log_format);
    let tables = pipeline_tables(&mut config).await?;
    let request =
        MaintenanceRequest::new(&list(settings.get("action")), &list(settings.get("table")), settings.get("dry-run") == "true", &config)?
            .with_replay_filter(settings.get("since"), settings.get("reason"))?
            .or_tables(tables.as_ref());
    let catalogs = Catalogs::connect(&config).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(config.commit_timeout_ms);
    let report = maintain(&catalogs, &request, deadline).await?;
    println!("{}", serde_json::to_string(&report)?);
    let failures = report.failures();
    if !failures.is_empty() {
        let text: Vec<String> = failures.iter().map(|(t, e)| format!("{t}: {e}")).collect();
        anyhow::bail!("maintenance failed for {}", text.join("; "));
    }
    Ok(())
}
