//! generate --model PATH --prompt TEXT [--max-tokens N] [--ids]
//!
//! Loads the model and an engine with their default parameters, submits the prompt as plain
//! text, and streams the greedy generation's text to stdout (with --ids, its token ids,
//! comma-separated), then a newline. Errors go to stderr: exit status 2 for usage, 1 otherwise.

use std::error::Error;
use std::io::{self, Write};
use std::process::ExitCode;

use pulseinfer::{Engine, EngineParams, Model, ModelParams, SamplingParams, TokenizeFlags};

const USAGE: &str =
    "usage: generate --model PATH --prompt TEXT [--max-tokens N (default 32)] [--ids]";

struct Args {
    model: String,
    prompt: String,
    max_tokens: i32,
    ids: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut model, mut prompt, mut max_tokens, mut ids) = (None, None, 32, false);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => model = Some(value()?),
            "--prompt" => prompt = Some(value()?),
            "--max-tokens" => {
                let text = value()?;
                max_tokens = text
                    .parse()
                    .map_err(|_| format!("--max-tokens expects a number, got '{text}'"))?;
            }
            "--ids" => ids = true,
            _ => return Err(format!("unknown argument '{flag}'")),
        }
    }
    Ok(Args {
        model: model.ok_or("--model is required")?,
        prompt: prompt.ok_or("--prompt is required")?,
        max_tokens,
        ids,
    })
}

fn generate(args: &Args) -> Result<(), Box<dyn Error>> {
    let model = Model::load(&args.model, &ModelParams::default())?;
    let engine = Engine::new(&model, &EngineParams::default())?;
    let greedy = SamplingParams::default().temperature(0.0).max_tokens(args.max_tokens);
    let mut stdout = io::stdout().lock();
    for (index, token) in
        engine.submit_text(&args.prompt, TokenizeFlags::DEFAULT, &greedy)?.enumerate()
    {
        let token = token?;
        if args.ids {
            write!(stdout, "{}{}", if index == 0 { "" } else { "," }, token.id)?;
        } else {
            stdout.write_all(token.text.as_bytes())?;
        }
        stdout.flush()?;
    }
    writeln!(stdout)?;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("generate: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match generate(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("generate: {error}");
            ExitCode::FAILURE
        }
    }
}
