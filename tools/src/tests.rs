//! The command line's shape: help for every command, usage errors that name the bad argument,
//! the `key=value` words scripts pass, and completions.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use crate::commands::{Cli, Command, Pipelines};

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("icestream").chain(args.iter().copied()))
}

fn error(args: &[&str]) -> String {
    let e = parse(args).expect_err("a usage error");
    assert_eq!(e.exit_code(), 2, "{args:?}");
    e.render().to_string()
}

/// Every command path, e.g. `["pipelines", "check"]`.
fn paths(cmd: &clap::Command, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    for sub in cmd.get_subcommands() {
        let mut path = prefix.clone();
        path.push(sub.get_name().to_string());
        out.push(path.clone());
        paths(sub, path, out);
    }
}

#[test]
fn every_command_has_help() {
    Cli::command().debug_assert();
    let mut all = Vec::new();
    paths(&Cli::command(), Vec::new(), &mut all);
    assert!(all.len() > 20, "{all:?}");
    for path in all {
        for flag in ["-h", "--help"] {
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push(flag);
            let e = parse(&args).expect_err("help is not a command");
            assert_eq!(e.kind(), ErrorKind::DisplayHelp, "{args:?}");
            let text = e.render().to_string();
            assert!(text.contains(&format!("Usage: icestream {}", path.join(" "))), "{args:?}: {text}");
        }
    }
    // A command's options with their help; configuration knobs in the long help only.
    let short = parse(&["maintain", "-h"]).unwrap_err().render().to_string();
    assert!(short.contains("--action") && short.contains("--dry-run") && !short.contains("--warehouse"), "{short}");
    let long = parse(&["maintain", "--help"]).unwrap_err().render().to_string();
    assert!(long.contains("--warehouse") && long.contains("ICESTREAM_WAREHOUSE"), "{long}");
}

#[test]
fn usage_errors_name_the_bad_argument() {
    let cases: &[(&[&str], &str)] = &[
        (&["nope"], "'nope'"),
        (&["maintain", "--tabel", "t"], "'--tabel'"),
        (&["maintain", "tabel=t"], "unknown key `tabel`"),
        (&["maintain", "dry-run=maybe"], "\"maybe\" for `dry-run`"),
        (&["maintain", "--dry-run=maybe"], "'maybe' for '--dry-run"),
        (&["report"], "<TABLE>"),
        (&["report", "warehouse=w"], "`warehouse=w` is a warehouse= setting"),
        (&["report", "t", "extra"], "expected key=value, got \"extra\""),
        (&["audit", "t", "--bootstrap"], "'--bootstrap <TEXT>'"),
        (&["pipelines", "check"], "<FILE>"),
        (&["pipelines", "lint", "f"], "'lint'"),
        (&["dead-letters", "replay", "t", "since"], "got \"since\""),
        (&["gen-event", "records=-1"], "\"-1\" for `records`"),
        (&["gen-event", "warehouse=w"], "unknown key `warehouse`"),
        (&["ingest"], "<EVENT.json ... KEY=VALUE>"),
        (&["completions", "tcsh"], "'tcsh'"),
    ];
    for (args, named) in cases {
        let text = error(args);
        assert!(text.contains(named), "{args:?} should name {named}: {text}");
    }
}

fn words(args: &[&str]) -> Vec<String> {
    match parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}")).command {
        Command::Maintain(o) => o.words,
        Command::Status(o) => o.words,
        Command::Ingest(o) => o.words,
        Command::Report { options, .. } => options.words,
        Command::Pipelines(Pipelines::Check { options, .. }) => options.words,
        Command::GenEvent(o) => o.words,
        other => panic!("{other:?}"),
    }
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

#[test]
fn key_value_words_parse_as_before_and_flags_become_words() {
    // The spellings of scripts, the Makefile, tests and docs, unchanged.
    assert_eq!(
        words(&["maintain", "action=compact", "table=t", "warehouse=./w"]),
        strings(&["action=compact", "table=t", "warehouse=./w"])
    );
    assert_eq!(words(&["status", "output=json", "pipelines=p.toml"]), strings(&["output=json", "pipelines=p.toml"]));
    assert_eq!(words(&["report", "t", "warehouse=w"]), strings(&["warehouse=w"]));
    assert_eq!(words(&["gen-event", "format=json", "records=10", "out=e.json"]), strings(&["format=json", "records=10", "out=e.json"]));
    // Flags, in either spelling of a key with `_`, land as the same words after the positional ones.
    assert_eq!(
        words(&[
            "maintain",
            "--action",
            "compact",
            "--table=t",
            "--dry-run",
            "--target-file-size-bytes",
            "1024",
            "--commit_timeout_ms",
            "9"
        ]),
        strings(&["action=compact", "table=t", "dry-run=true", "target_file_size_bytes=1024", "commit_timeout_ms=9"])
    );
    assert_eq!(words(&["maintain", "--dry-run=false", "table=t"]), strings(&["table=t", "dry-run=false"]));
    assert_eq!(words(&["pipelines", "check", "f.toml", "--output", "json"]), strings(&["output=json"]));
    // `ingest`'s files lead its words; the knobs follow, flags last.
    let w = words(&["ingest", "a.json", "b.json", "warehouse=w", "--dedup", "batch"]);
    assert_eq!(crate::cli::leading(w), (strings(&["a.json", "b.json"]), strings(&["warehouse=w", "dedup=batch"])));
    // The command options shadow a configuration knob of the same key, as `Settings::split_options` does.
    let (options, rest) =
        icestream::model::config::Settings::split_options(crate::maintain::MAINTAIN_OPTIONS, &words(&["maintain", "--table", "t"]))
            .unwrap();
    assert_eq!((options.get("table"), rest.len()), ("t", 0));
}

#[test]
fn completions_generate_for_every_shell() {
    use clap::ValueEnum;
    for shell in clap_complete::Shell::value_variants() {
        let mut out = Vec::new();
        clap_complete::generate(*shell, &mut Cli::command(), "icestream", &mut out);
        let text = String::from_utf8(out).unwrap();
        for word in ["maintain", "dead-letters", "dry-run", "warehouse"] {
            assert!(text.contains(word), "{shell}: no {word}");
        }
    }
    assert!(matches!(parse(&["completions", "bash"]).unwrap().command, Command::Completions { .. }));
}
