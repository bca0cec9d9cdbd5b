//! `icestream help [COMMAND]` (the knob tables, Markdown: docs/configuration.md's table is
//! pasted from it) and `icestream completions SHELL`.

use anyhow::{Result, bail};
use clap::CommandFactory;
use icestream::model::config::{KNOBS, knobs_markdown};

use crate::commands::Cli;

pub fn run(command: Option<&str>) -> Result<()> {
    match command {
        None => {
            println!("{}\n", Cli::command().render_long_help());
            print!("{}", knobs_markdown(KNOBS));
        }
        Some("gen-event") => icestream::dev::generate::GENERATOR_OPTIONS.iter().for_each(|list| print!("{}", knobs_markdown(list))),
        #[cfg(not(feature = "kafka"))]
        Some(c @ ("produce" | "simulate-cdc" | "esm")) => return Err(icestream_tools::not_built(&format!("`icestream {c}`"), "kafka")),
        #[cfg(feature = "kafka")]
        Some("produce" | "simulate-cdc") => {
            icestream_tools::produce::PRODUCE_OPTIONS.iter().for_each(|list| print!("{}", knobs_markdown(list)))
        }
        #[cfg(feature = "kafka")]
        Some("esm") => print!(
            "{}\nThe function's own knobs (below) pass through with invoke=inprocess.\n\n{}",
            knobs_markdown(icestream_tools::esm::ESM_OPTIONS),
            knobs_markdown(KNOBS)
        ),
        Some(name) => {
            if Cli::command().find_subcommand(name).is_none() {
                let names: Vec<String> = Cli::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
                bail!("unknown command {name:?}: commands are {}", names.join(", "));
            }
            // What `icestream NAME --help` prints (clap's usage line needs the whole path).
            if let Err(help) = Cli::command().try_get_matches_from(["icestream", name, "--help"]) {
                help.print()?;
            }
        }
    }
    Ok(())
}

pub fn completions(shell: clap_complete::Shell) {
    clap_complete::generate(shell, &mut Cli::command(), "icestream", &mut std::io::stdout());
}
