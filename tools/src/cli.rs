//! The bridge between clap and the knob lists: a command's options ([`Knob`] lists, the one
//! definition of each key) become both `--key value` flags (with help, possible values and
//! completions) and the `key=value` words scripts have always passed. Clap parses the shape of
//! a command line; the values land as `key=value` words in [`Options::words`], which each
//! command validates through [`icestream::model::config::Settings`] as before. Adding a key to a
//! command is one line in its list.

use std::marker::PhantomData;

use clap::builder::PossibleValuesParser;
use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches};
use icestream::model::config::{Allowed, KNOBS, Knob, Settings};

/// The option lists of one command.
pub trait OptionList: 'static {
    /// The command's own options, in the order `--help` lists them.
    const LISTS: &'static [&'static [Knob]];
    /// Whether the command reads the configuration knobs ([`KNOBS`], also `ICESTREAM_*`).
    const CONFIG: bool = true;
    /// What the positional words are (some commands take a leading file or table among them).
    const WORDS: &'static str = "KEY=VALUE";
    /// Whether at least one positional word is needed.
    const WORDS_REQUIRED: bool = false;
    /// Whether words without `=` (files, a table) may lead the `key=value` ones.
    const LEADING: bool = false;
}

/// Only the configuration knobs.
pub struct ConfigOnly;

impl OptionList for ConfigOnly {
    const LISTS: &'static [&'static [Knob]] = &[];
}

/// A command's `key=value` words: the positional ones as given, then one per `--key value` flag.
pub struct Options<L> {
    pub words: Vec<String>,
    list: PhantomData<fn() -> L>,
}

impl<L> std::fmt::Debug for Options<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options").field("words", &self.words).finish()
    }
}

const WORDS_ID: &str = "knob-words";
const OPTIONS: &str = "Options (also as key=value)";
const CONFIGURATION: &str = "Configuration (also as key=value, or ICESTREAM_<KEY> in the environment)";

/// Ids apart from the commands' own arguments (`table` is a positional of some and a knob).
fn id(knob: &Knob) -> String {
    format!("knob:{}", knob.key)
}

/// Every knob a command takes, each key once (a command option shadows a knob of the same key,
/// as `Settings::split_options` does).
fn knobs<L: OptionList>() -> Vec<(&'static Knob, bool)> {
    let mut out: Vec<(&'static Knob, bool)> = Vec::new();
    let config: &'static [Knob] = if L::CONFIG { KNOBS } else { &[] };
    let lists = L::LISTS.iter().map(|l| (*l, false)).chain(std::iter::once((config, true)));
    for (list, is_config) in lists {
        for knob in list {
            if !out.iter().any(|(k, _)| k.key == knob.key) {
                out.push((knob, is_config));
            }
        }
    }
    out
}

fn flag(knob: &'static Knob, is_config: bool) -> Arg {
    let long = knob.key.replace('_', "-");
    let mut help = knob.help.to_string();
    if !knob.default.is_empty() {
        help += &format!(" [default: {}]", knob.default);
    }
    if is_config {
        help += &format!(" [env: {}]", knob.env_name());
    }
    let mut arg = Arg::new(id(knob))
        .long(long.clone())
        .help(help)
        .action(ArgAction::Set)
        .help_heading(if is_config { CONFIGURATION } else { OPTIONS })
        // The knob tables are long: `-h` shows the command's own options, `--help` all.
        .hide_short_help(is_config);
    if long != knob.key {
        arg = arg.alias(knob.key);
    }
    match knob.allowed {
        Allowed::OneOf(words) => {
            arg = arg.value_name(words.join("|")).value_parser(PossibleValuesParser::new(words.iter().copied()));
            // A bare `--dry-run` means true; `=` so the flag never takes the next word.
            if words.contains(&"true") && words.contains(&"false") {
                arg = arg.num_args(0..=1).require_equals(true).default_missing_value("true");
            }
        }
        Allowed::Integer { .. } => arg = arg.value_name("N"),
        Allowed::Url => arg = arg.value_name("URL"),
        Allowed::Text | Allowed::OptionalText => arg = arg.value_name("TEXT"),
    }
    arg
}

impl<L: OptionList> clap::Args for Options<L> {
    fn augment_args(cmd: Command) -> Command {
        let words = Arg::new(WORDS_ID)
            .value_name(L::WORDS)
            .num_args(if L::WORDS_REQUIRED { 1.. } else { 0.. })
            .action(ArgAction::Append)
            .required(L::WORDS_REQUIRED)
            .value_parser(word::<L>)
            .help(if L::CONFIG {
                "Options and configuration knobs as key=value words (`icestream help` lists the knobs)"
            } else {
                "Options as key=value words"
            });
        let flags = knobs::<L>().into_iter().map(|(k, is_config)| flag(k, is_config));
        cmd.arg(words).args(flags)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl<L: OptionList> FromArgMatches for Options<L> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut words: Vec<String> = matches.get_many::<String>(WORDS_ID).into_iter().flatten().cloned().collect();
        for (knob, _) in knobs::<L>() {
            if let Some(value) = matches.get_one::<String>(&id(knob)) {
                words.push(format!("{}={value}", knob.key));
            }
        }
        Ok(Self { words, list: PhantomData })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// One positional word, checked against the command's knobs (key known, value allowed), so a
/// mistake fails before any work with the command's usage and every key it takes. A command
/// with no lists (one this build leaves out) takes any word and says itself why it cannot run.
fn word<L: OptionList>(word: &str) -> Result<String, String> {
    let knobs = knobs::<L>();
    if knobs.is_empty() {
        return Ok(word.to_string());
    }
    let Some((key, value)) = word.split_once('=') else {
        return if L::LEADING { Ok(word.to_string()) } else { Err(format!("expected key=value, got {word:?}")) };
    };
    let Some((knob, _)) = knobs.iter().find(|(k, _)| k.key == key.trim()) else {
        let keys: Vec<&str> = knobs.iter().map(|(k, _)| k.key).collect();
        return Err(format!("unknown key `{}`: known keys are {}", key.trim(), keys.join(", ")));
    };
    Settings::over(std::slice::from_ref(*knob)).set(knob.key, value.trim()).map_err(|e| e.to_string())?;
    Ok(word.to_string())
}

/// A leading positional (a table, a file) that must not be a `key=value` word: the word would
/// otherwise be taken as the name and the mistake found far later.
pub fn not_a_setting(word: &str) -> Result<String, String> {
    match word.split_once('=') {
        Some((key, _)) => Err(format!("`{word}` is a {key}= setting; the name comes first")),
        None => Ok(word.to_string()),
    }
}

/// The leading words without `=` (files, a table), and the `key=value` words after them.
pub fn leading(words: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut rest = words;
    let n = rest.iter().take_while(|w| !w.contains('=')).count();
    let first = rest.drain(..n).collect();
    (first, rest)
}
