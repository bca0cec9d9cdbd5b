//! `icestream`: the command line for people. Every command that touches tables runs the same
//! library code as the Lambda functions. The command line's shape is in [`commands`]; each
//! command's work in its own module.

mod audit;
mod cdc;
mod cli;
mod commands;
mod committer;
mod dead_letters;
mod demo;
mod dispatch;
mod gen_event;
mod help;
mod ingest;
mod maintain;
mod pipelines;
mod recover;
mod report;
mod status;
mod stream;
#[cfg(test)]
mod tests;

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = commands::Cli::parse();
    // Rust ignores SIGPIPE, so a write to a closed pipe (`icestream audit ... | head -1`) is an
    // error and `println!` panics on it. A command ends quietly instead, as `cat` does. Not the
    // long-running `esm`, whose writes to a lost peer must stay errors it handles. (Sockets are
    // unaffected: Rust sends with MSG_NOSIGNAL.)
    if !matches!(cli.command, commands::Command::Esm(_)) {
        // SAFETY: sets the process's disposition for one signal; no handler of ours runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if let Err(e) = dispatch::run(cli.command).await {
        eprintln!("icestream: {e:#}");
        std::process::exit(2);
    }
}
