//! `icestream gen-event [key=value ...]`: a synthetic MSK event ([`icestream::dev::generate`]) to a
//! file (its expectation to standard output) or to standard output (the expectation to
//! standard error).

use anyhow::{Context, Result};
use icestream::dev::generate::{GENERATOR_OPTIONS, GeneratorOptions, generate};
use icestream::model::config::Knob;

use crate::cli::{OptionList, Options};

pub struct GenEvent;

impl OptionList for GenEvent {
    const LISTS: &'static [&'static [Knob]] = GENERATOR_OPTIONS;
    const CONFIG: bool = false;
}

pub fn run(options: Options<GenEvent>) -> Result<()> {
    let opts = GeneratorOptions::from_args(&options.words)?;
    let generated = generate(&opts)?;
    let text = generated.event.to_string();
    let expectation = serde_json::to_string(&generated.expectation)?;
    if opts.out == "-" {
        println!("{text}");
        eprintln!("{expectation}");
    } else {
        std::fs::write(&opts.out, text).with_context(|| format!("writing {}", opts.out))?;
        println!("{expectation}");
    }
    Ok(())
}
