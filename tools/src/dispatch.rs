//! Runs the command the line names: one module per command does the work.

use anyhow::Result;

use crate::commands::{Command, DeadLetters, Pipelines};
use crate::{audit, cdc, committer, dead_letters, demo, gen_event, help, ingest, maintain, pipelines, recover, report, status, stream};

pub async fn run(command: Command) -> Result<()> {
    match command {
        Command::Ingest(o) => ingest::run(o).await,
        Command::Cdc { .. } => anyhow::bail!(cdc::CDC_IS_GONE),
        Command::CdcRebuild(o) => cdc::rebuild(o).await,
        Command::Pipelines(Pipelines::Check { file, options }) => pipelines::check(file, options.words).await,
        Command::Pipelines(Pipelines::Tables { file }) => pipelines::tables(&file).await,
        Command::Report { table, options } => report::run(&table, options).await,
        Command::Audit { table, options } => audit::run(table, options.words).await,
        Command::Status(o) => status::run(o.words).await,
        Command::DeadLetters(DeadLetters::Replay { table, options }) => dead_letters::run(table, options.words).await,
        Command::Recover { source, options } => recover::run(source, options.words).await,
        Command::GenEvent(o) => gen_event::run(o),
        Command::Maintain(o) => maintain::run(o.words).await,
        Command::Committer { source, options } => committer::run(source, options.words).await,
        Command::Demo(o) => demo::run(o.words).await,
        Command::Produce(o) => stream::produce(o, false).await,
        Command::SimulateCdc(o) => stream::produce(o, true).await,
        Command::Esm(o) => stream::esm(o).await,
        Command::Contract => {
            let contract = icestream::services::deployment::contract_json(icestream::services::metrics::emitted_metrics(&[
                &icestream::Summary::with_every_figure(),
                &icestream::services::queued::report::BatchReport::default(),
            ]));
            println!("{}", serde_json::to_string_pretty(&contract)?);
            Ok(())
        }
        Command::Help { command } => help::run(command.as_deref()),
        Command::Completions { shell } => {
            help::completions(shell);
            Ok(())
        }
    }
}
