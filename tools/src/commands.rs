//! The command line's shape: every command, its positional arguments and its option lists.
//! The work is in one module per command.

use clap::{Parser, Subcommand};

use crate::cli::{ConfigOnly, Options, not_a_setting};
use crate::{audit, cdc, committer, dead_letters, demo, gen_event, ingest, maintain, pipelines, recover, status, stream};

/// Serverless Kafka -> Apache Iceberg ingestion: every command that touches tables runs the
/// same library code as the Lambda functions.
#[derive(Parser, Debug)]
#[command(
    name = "icestream",
    // Usage lines say `icestream` whatever the file is called (the demo build is icestream-demo).
    bin_name = "icestream",
    version,
    disable_help_subcommand = true,
    arg_required_else_help = true,
    after_help = "Configuration comes from ICESTREAM_* environment variables, then key=value words (or --key value).\n`icestream help` lists every configuration knob; `icestream <command> --help` a command's options."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the ingest function's code on MSK event files in order, as one warm function instance
    /// would (clients and caches built once); prints a one-line JSON summary each
    Ingest(Options<ingest::Ingest>),
    /// Removed: the accounts feed is an upsert pipeline (`ingest` with pipelines=)
    #[command(hide = true)]
    Cdc {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        rest: Vec<String>,
    },
    /// Recompute an upsert pipeline's table (TABLE, with pipelines=) from its changelog in one
    /// commit; prints a JSON report
    CdcRebuild(Options<cdc::Rebuild>),
    /// Validate a pipeline file, or list the tables it implies
    #[command(subcommand)]
    Pipelines(Pipelines),
    /// Snapshots, files, rows and offset watermarks of a table
    Report {
        #[arg(value_parser = not_a_setting)]
        table: String,
        #[command(flatten)]
        options: Options<ConfigOnly>,
    },
    /// Prove exactly-once from the table: no offset twice across the table and its dead letters,
    /// rows under their watermarks, gaps listed (explained by the broker with bootstrap=); prints
    /// the verdict and JSON; exits 1 on a failure
    Audit {
        #[arg(value_parser = not_a_setting)]
        table: String,
        #[command(flatten)]
        options: Options<audit::Audit>,
    },
    /// Per pipeline table: last commit, freshness, rows and files in the last hour, small files
    /// waiting for compaction, dead letters in the last hour, pending queued commit requests
    Status(Options<status::Status>),
    /// Dead letters of a pipeline table
    #[command(subcommand)]
    DeadLetters(DeadLetters),
    /// Ingest the batches a Kafka mapping discarded to its S3 on-failure destination into their
    /// tables, below the watermark, once (marked replayed for the audit); prints JSON
    Recover {
        #[arg(value_name = "s3://BUCKET/PREFIX|DIR", value_parser = not_a_setting)]
        source: String,
        #[command(flatten)]
        options: Options<recover::Recover>,
    },
    /// Write a synthetic MSK event
    GenEvent(Options<gen_event::GenEvent>),
    /// Run the maintenance function's code; prints the report as JSON
    Maintain(Options<maintain::Maintain>),
    /// Run the committer function's code on an SQS event file, or on one batch received from
    /// commit_queue_url (acknowledging what it committed); prints JSON
    Committer {
        #[arg(value_name = "EVENT.json|poll", value_parser = not_a_setting)]
        source: String,
        #[command(flatten)]
        options: Options<committer::Committer>,
    },
    /// Generate an event, ingest it, report, and read a few aggregates back
    Demo(Options<demo::Demo>),
    /// Telemetry (or domain=cdc changes) into a Kafka topic
    Produce(Options<stream::Produce>),
    /// Bank-account changes (I/U/D, hot keys) into a Kafka topic: produce with domain=cdc
    SimulateCdc(Options<stream::Produce>),
    /// The local event source mapping: Kafka topic -> batches -> function
    Esm(Options<stream::Esm>),
    /// What each Lambda function needs from its deployment, as JSON: knobs read, AWS actions
    /// called (per resource, catalog and commit mode), metrics emitted
    Contract,
    /// The configuration knobs as a Markdown table, or a command's options
    Help {
        /// A command (gen-event, produce, simulate-cdc and esm print their option tables)
        command: Option<String>,
    },
    /// A shell completion script, to standard output
    #[command(
        after_help = "bash: icestream completions bash > /etc/bash_completion.d/icestream\nzsh:  icestream completions zsh > \"${fpath[1]}/_icestream\""
    )]
    Completions { shell: clap_complete::Shell },
}

#[derive(Subcommand, Debug)]
pub enum Pipelines {
    /// Validate a pipeline file; print each pipeline's Iceberg schema (field ids), partition spec
    /// and topics
    Check {
        #[arg(value_parser = not_a_setting)]
        file: String,
        #[command(flatten)]
        options: Options<pipelines::Check>,
    },
    /// Every table the file implies (dead-letter and changelog tables too) as JSON, offline: what
    /// a deployment grants, schedules and alarms
    Tables {
        #[arg(value_parser = not_a_setting)]
        file: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum DeadLetters {
    /// Decode the table's dead letters again with the current pipeline and append those that now
    /// decode, once (marked, never deleted); prints JSON
    Replay {
        #[arg(value_parser = not_a_setting)]
        table: String,
        #[command(flatten)]
        options: Options<dead_letters::Replay>,
    },
}
