//! `codemode`: run a program against providers served from a real store, print the outcome.
//!
//! Exit status: 0 for a result, 1 for an error outcome, 2 for bad usage or unreadable
//! input (with a message on stderr saying what to fix).

mod db;
mod fixture;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use codemode_executor::{Executor, Request};

#[derive(Parser)]
#[command(
    name = "codemode",
    version,
    about = "Run programs written by language models in a sandbox whose only way out is a tool call."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run PROGRAM.js and print its outcome as one JSON object (the codec's form).
    Run {
        /// The program: the source of an async arrow function (or any form the normalizer accepts).
        program: PathBuf,
        /// Serve the provider `db` from SQLite: FILE.sql is loaded into memory, anything else opened read-only.
        #[arg(long, value_name = "FILE")]
        db: Option<PathBuf>,
        /// Serve fixed results: a JSON object mapping "provider.tool" to the value it returns.
        #[arg(long, value_name = "FILE.json")]
        fixture: Option<PathBuf>,
        /// Wall-clock limit in milliseconds.
        #[arg(long, value_name = "N")]
        timeout_ms: Option<u64>,
        /// The engine's memory limit in bytes.
        #[arg(long, value_name = "N")]
        memory_limit_bytes: Option<usize>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        Command::Run { program, db, fixture, timeout_ms, memory_limit_bytes } => {
            match run(program, db, fixture, timeout_ms, memory_limit_bytes) {
                Ok(code) => code,
                Err(message) => {
                    eprintln!("codemode: {message}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

fn run(
    program: PathBuf,
    db: Option<PathBuf>,
    fixture: Option<PathBuf>,
    timeout_ms: Option<u64>,
    memory_limit_bytes: Option<usize>,
) -> Result<ExitCode, String> {
    let code = std::fs::read_to_string(&program).map_err(|e| {
        format!("cannot read the program {}: {e}. Pass the path of a .js file.", program.display())
    })?;
    let mut request = Request::new(code);
    match (db, fixture) {
        (Some(_), Some(_)) => return Err("give --db or --fixture, not both".to_owned()),
        (Some(path), None) => {
            let store = db::Store::open(&path)?;
            request = request.provider(db::descriptor()).dispatch(store.dispatch());
        }
        (None, Some(path)) => {
            let fixture = fixture::Fixture::load(&path)?;
            request = request.providers(fixture.descriptors()).dispatch(fixture.dispatch());
        }
        (None, None) => {}
    }
    if let Some(ms) = timeout_ms {
        request = request.timeout(Duration::from_millis(ms));
    }
    if let Some(bytes) = memory_limit_bytes {
        request = request.memory_limit_bytes(bytes);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let executor = Executor::default();
    let outcome = runtime.block_on(executor.execute(request));
    println!("{}", outcome.to_json_string());
    Ok(if outcome.error_text().is_some() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
