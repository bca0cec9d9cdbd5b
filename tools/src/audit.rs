//! `icestream audit TABLE [bootstrap=HOST:PORT] [key=value ...]`: the audit of a table and its
//! dead-letter table ([`icestream::services::audit`]); with `bootstrap=`, the broker explains the gaps.
//! Prints the verdict, then the report as one JSON line; exits 1 when the audit fails.

use anyhow::Result;
use icestream::Config;
use icestream::engine::catalog::Catalogs;
#[cfg(feature = "kafka")]
use icestream::model::config::Dedup;
use icestream::model::config::{Allowed, Knob, Settings};
use icestream::model::pipeline::PipelineSet;
#[cfg(feature = "kafka")]
use icestream::services::audit::AuditReport;
use icestream::services::audit::{AuditTarget, Verdict, audit_of};
#[cfg(feature = "kafka")]
use icestream_tools::broker_gaps::BrokerGaps;

const AUDIT_OPTIONS: &[Knob] = &[Knob {
    key: "bootstrap",
    default: "",
    allowed: Allowed::Text,
    help: "Kafka bootstrap servers to ask why offsets are missing (retention, compaction, transaction markers, dedup); empty: gaps are listed unexplained",
}];

/// The command's option list for the command line (`crate::cli`).
pub struct Audit;

impl crate::cli::OptionList for Audit {
    const LISTS: &'static [&'static [Knob]] = &[AUDIT_OPTIONS];
}

pub async fn run(table: String, args: Vec<String>) -> Result<()> {
    let (options, knobs) = Settings::split_options(AUDIT_OPTIONS, &args)?;
    let bootstrap = options.get("bootstrap");
    #[cfg(not(feature = "kafka"))]
    if !bootstrap.is_empty() {
        return Err(icestream_tools::not_built("`audit bootstrap=` (the broker's view of the gaps)", "kafka"));
    }
    let mut config = Config::from_env_and_args(&knobs)?;
    icestream::base::logging::init(&config.log_format);
    let set = PipelineSet::from_config(&config).await?;
    config.namespace = set.namespace.clone();
    let catalogs = Catalogs::connect_read_only(&config).await?;
    let target = AuditTarget::of(&set.tables_by_pipeline(), &table)?;
    #[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
    let mut report = audit_of(&catalogs, &target).await?;
    #[cfg(feature = "kafka")]
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

#[cfg(feature = "kafka")]
async fn explain(report: &mut AuditReport, bootstrap: &str, dedup: bool) -> Result<()> {
    let broker = BrokerGaps::connect(bootstrap, dedup)?;
    let mut explained = Vec::with_capacity(report.gaps.len());
    for gap in &report.gaps {
        // The writer recorded what its dedup dropped: exact, the broker adds nothing.
        if gap.cause == Some(icestream::services::audit::GapCause::Deduplicated) {
            explained.push(vec![gap.clone()]);
            continue;
        }
        explained.push(broker.explain(gap).await?);
    }
    let mut explained = explained.into_iter();
    report.explain_gaps(|_| Ok(explained.next().unwrap_or_default()))?;
    Ok(())
}
