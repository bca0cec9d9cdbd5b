//! The knob machinery: what a knob accepts ([`Allowed`]), one knob ([`Knob`]) and the validated
//! values over a list of knobs ([`Settings`]), spelled `key=value` or `ICESTREAM_KEY`. The
//! tools reuse it with their own lists.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::base::error::{Error, Result};

/// Prefix of every knob's environment-variable spelling.
pub const ENV_PREFIX: &str = "ICESTREAM_";

/// What values a knob accepts.
#[derive(Debug, Clone, Copy)]
pub enum Allowed {
    /// Exactly one of these words.
    OneOf(&'static [&'static str]),
    /// A whole number in `min..=max`.
    Integer { min: i64, max: i64 },
    /// Any non-empty text (names, paths, URIs).
    Text,
    /// An `http://` or `https://` URL, or empty for "not set".
    Url,
    /// Any text, or empty for "not set".
    OptionalText,
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Allowed::OneOf(words) => write!(f, "one of {}", words.join("|")),
            Allowed::Integer { min, max } => write!(f, "a whole number from {min} to {max}"),
            Allowed::Text => write!(f, "non-empty text"),
            Allowed::Url => write!(f, "an http:// or https:// URL (empty: not set)"),
            Allowed::OptionalText => write!(f, "any text (empty: not set)"),
        }
    }
}

/// One configuration knob.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    pub key: &'static str,
    pub default: &'static str,
    pub allowed: Allowed,
    pub help: &'static str,
}

impl Knob {
    /// The knob's environment-variable spelling, e.g. `ICESTREAM_TARGET_FILE_SIZE_BYTES`.
    pub fn env_name(&self) -> String {
        format!("{ENV_PREFIX}{}", self.key.to_ascii_uppercase())
    }

    pub(super) fn check(&self, value: &str) -> Result<()> {
        let ok = match self.allowed {
            Allowed::OneOf(words) => words.contains(&value),
            Allowed::Integer { min, max } => value.parse::<i64>().is_ok_and(|n| (min..=max).contains(&n)),
            Allowed::Text => !value.trim().is_empty(),
            Allowed::Url => value.is_empty() || value.starts_with("https://") || value.starts_with("http://"),
            Allowed::OptionalText => true,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::Config(format!("bad value {value:?} for `{}` ({}): allowed is {}", self.key, self.env_name(), self.allowed)))
        }
    }
}

/// Raw, validated values by key over one knob list; typed accessors live on [`Config`] (and
/// on the tools' own option structs, which reuse this with their own lists).
#[derive(Debug, Clone)]
pub struct Settings {
    lists: Vec<&'static [Knob]>,
    values: BTreeMap<&'static str, String>,
}

impl Settings {
    /// Settings over another list of knobs (command options that are not configuration).
    pub fn over(knobs: &'static [Knob]) -> Self {
        Self::over_lists(&[knobs])
    }

    /// Settings over several lists at once (a command that takes options of two kinds).
    pub fn over_lists(lists: &[&'static [Knob]]) -> Self {
        Self { lists: lists.to_vec(), values: BTreeMap::new() }
    }

    fn knobs(&self) -> impl Iterator<Item = &'static Knob> + '_ {
        self.lists.iter().flat_map(|list| list.iter())
    }

    fn knob(&self, key: &str) -> Option<&'static Knob> {
        self.knobs().find(|k| k.key == key)
    }

    /// Set one knob, validating key and value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let knob = self.knob(key).ok_or_else(|| {
            let keys: Vec<_> = self.knobs().map(|k| k.key).collect();
            Error::Config(format!("unknown key `{key}`: known keys are {}", keys.join(", ")))
        })?;
        knob.check(value)?;
        self.values.insert(knob.key, value.to_string());
        Ok(())
    }

    /// `key=value` words, as given on the command line.
    pub fn apply_args<I, S>(&mut self, args: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        for arg in args {
            let arg = arg.as_ref();
            let (key, value) = arg.split_once('=').ok_or_else(|| Error::Config(format!("expected key=value, got {arg:?}")))?;
            self.set(key.trim(), value.trim())?;
        }
        Ok(())
    }

    /// Every `ICESTREAM_*` variable of an environment. An `ICESTREAM_` name that is no knob is an
    /// error, so a typo in a deployment stops start-up instead of being ignored.
    pub fn apply_env<I>(&mut self, vars: I) -> Result<()>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else { continue };
            let key = rest.to_ascii_lowercase();
            if self.knob(&key).is_none() {
                let names: Vec<_> = self.knobs().map(Knob::env_name).collect();
                return Err(Error::Config(format!("unknown environment variable {name}: known are {}", names.join(", "))));
            }
            self.set(&key, &value)?;
        }
        Ok(())
    }

    /// Split command arguments into these options (validated) and the rest (`key=value`
    /// configuration words, left for [`Config`]).
    pub fn split_options<S: AsRef<str>>(knobs: &'static [Knob], args: &[S]) -> Result<(Self, Vec<String>)> {
        let (options, rest): (Vec<&str>, Vec<&str>) =
            args.iter().map(AsRef::as_ref).partition(|a| knobs.iter().any(|o| a.split_once('=').is_some_and(|(k, _)| k.trim() == o.key)));
        let mut settings = Self::over(knobs);
        settings.apply_args(options)?;
        Ok((settings, rest.into_iter().map(str::to_string).collect()))
    }

    /// The value of `key`, or its default.
    pub fn get(&self, key: &'static str) -> &str {
        match self.values.get(key) {
            Some(v) => v,
            None => self.knob(key).map(|k| k.default).unwrap_or_default(),
        }
    }

    /// The value of `key` parsed (already validated against its knob).
    pub fn parse<T: FromStr>(&self, key: &'static str) -> Result<T> {
        let raw = self.get(key);
        raw.parse::<T>().map_err(|_| Error::Config(format!("bad value {raw:?} for `{key}`")))
    }
}

/// A Markdown table of knobs, for `icestream help` and docs/configuration.md.
pub fn knobs_markdown(knobs: &[Knob]) -> String {
    let mut out = String::from("| key | environment | default | allowed | what |\n|---|---|---|---|---|\n");
    for k in knobs {
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} |\n",
            k.key,
            k.env_name(),
            if k.default.is_empty() { "(not set)".to_string() } else { format!("`{}`", k.default) },
            // A bare `|` would end the Markdown cell.
            k.allowed.to_string().replace('|', "\\|"),
            k.help.replace('|', "\\|")
        ));
    }
    out
}
