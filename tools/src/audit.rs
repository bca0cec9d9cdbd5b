//! `icestream audit TABLE [bootstrap=HOST:PORT] [key=value ...]`: the audit of a table and its
//! dead-letter table ([`icestream::audit`]); with `bootstrap=`, the broker explains the gaps.
//! Prints the verdict, then the report as one JSON line; exits 1 when the audit fails.

use anyhow::{Result, bail};
use icestream::audit::{AuditReport, Verdict, audit};
use icestream::catalog::Catalogs;
use icestream::config::{Allowed, Dedup, Knob, Settings};
use icestream::pipeline::PipelineSet;
use icestream::Config;
use icestream_tools::broker_gaps::BrokerGaps;

const AUDIT_OPTIONS: &[Knob] = &[Knob {
    key: "bootstrap",
    default: "",
    allowed: Allowed::Text,
    help: "Kafka bootstrap servers to ask why offsets are missing (retention, compaction, transaction markers, dedup); empty: gaps are listed unexplained",
}];

pub async fn run(mut args: Vec<String>) -> Result<()> {
    if args.is_empty() || args[0].contains('=') {
        bail!("usage: icestream audit TABLE [bootstrap=HOST:PORT] [key=value ...]");
    }
    let table = args.remove(0);
    let (options, knobs) = Settings::split_options(AUDIT_OPTIONS, &args)?;
    let mut config = Config::from_env_and_args(&knobs)?;
    icestream::logging::init(&config.log_format);
    let set = PipelineSet::from_config(&config).await?;
    config.namespace = set.namespace.clone();
    let catalogs = Catalogs::connect(&config).await?;
    let mut report = audit(&catalogs, &table).await?;
    let bootstrap = options.get("bootstrap");
    if !bootstrap.is_empty() {
        let dedup = set.pipelines.iter().find(|p| p.table == table).is_some_and(|p| p.dedup != Dedup::None);
        explain(&mut report, bootstrap, dedup).await?;
    }
    println!("{}", report.verdict_line());
    println!("{}", serde_json::to_string(&report)?);
    if report.verdict == Verdict::Fail {
        std::process::exit(1);
    }
    Ok(())
}

async fn explain(report: &mut AuditReport, bootstrap: &str, dedup: bool) -> Result<()> {
    let broker = BrokerGaps::connect(bootstrap, dedup)?;
    let mut explained = Vec::with_capacity(report.gaps.len());
    for gap in &report.gaps {
        explained.push(broker.explain(gap).await?);
    }
    let mut explained = explained.into_iter();
    report.explain_gaps(|_| Ok(explained.next().unwrap_or_default()))?;
    Ok(())
}
