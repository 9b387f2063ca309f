//! `codemode-conformance`: run golden transcripts against an executor and report.
//!
//! Exit status: 0 when every case passes, 1 when any fails, 2 for bad usage or an
//! unreadable transcript (the file is named).

use std::path::PathBuf;
use std::process::ExitCode;

use codemode_conformance::{
    Executes, ExpectedFailure, Implementation, Subprocess, Verdict, judge, load_dir, load_expected_failures,
    run_case,
};

/// The flags, as docs/conformance.md documents them.
#[derive(clap::Parser)]
#[command(
    name = "codemode-conformance",
    version,
    // As the hand-written parser did: a flag given twice keeps its last value.
    args_override_self = true,
    about = "Run golden transcripts against an executor: a line per case, then `N passed, N failed`.",
    after_help = AFTER_HELP
)]
struct Args {
    /// A directory of transcript files (*.json); may be given several times [default: the
    /// suite in conformance/transcripts].
    #[arg(long = "transcripts", value_name = "DIR", allow_hyphen_values = true)]
    dirs: Vec<PathBuf>,
    /// A program speaking the wire protocol on stdin/stdout, with its arguments as one
    /// string [default: the built-in executor, in-process].
    #[arg(long = "executor-cmd", value_name = "CMD", allow_hyphen_values = true, conflicts_with = "connect")]
    command: Option<String>,
    /// A daemon (codemode serve) at unix:PATH or tcp:HOST:PORT.
    #[arg(long, value_name = "ADDRESS", allow_hyphen_values = true)]
    connect: Option<String>,
    /// The daemon's token.
    #[arg(long, value_name = "FILE", allow_hyphen_values = true)]
    token_file: Option<PathBuf>,
    /// The engine it runs on, for engine-specific outcomes; in-process, the engine the
    /// built-in executor runs (quickjs, or v8 in a build with it).
    #[arg(long, value_name = "NAME", default_value = "quickjs", allow_hyphen_values = true)]
    engine: String,
    /// A JSON list of {"transcript": file name, "reason": why} this implementation is known
    /// to fail; such a case that passes fails the run, so the list cannot go stale.
    #[arg(long, value_name = "FILE", allow_hyphen_values = true)]
    expected_failures: Option<PathBuf>,
    /// One JSON object per case instead of text lines.
    #[arg(long)]
    json: bool,
}

const AFTER_HELP: &str = "\
Exit status:
  0  every case passed
  1  a case failed
  2  bad usage, an unreadable transcript (the file is named), or an executor that cannot be reached

Examples:
  codemode-conformance
  codemode-conformance --executor-cmd \"codemode stdio --engine quickjs\"
  codemode-conformance --transcripts my-cases/ --transcripts conformance/transcripts
  codemode-conformance --connect tcp:127.0.0.1:7700 --token-file token";

fn main() -> ExitCode {
    // clap exits 2 on bad usage, 0 after --help and --version.
    let mut args = <Args as clap::Parser>::parse();
    if args.dirs.is_empty() {
        args.dirs.push(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/transcripts")));
    }
    let mut cases = Vec::new();
    for dir in &args.dirs {
        match load_dir(dir) {
            Ok(found) => cases.extend(found),
            Err(problem) => {
                eprintln!("codemode-conformance: {problem}");
                return ExitCode::from(2);
            }
        }
    }
    let expected: Vec<ExpectedFailure> = match &args.expected_failures {
        None => Vec::new(),
        Some(path) => match load_expected_failures(path) {
            Ok(list) => list,
            Err(problem) => {
                eprintln!("codemode-conformance: {problem}");
                return ExitCode::from(2);
            }
        },
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread().enable_all().build() else {
        eprintln!("codemode-conformance: cannot start the async runtime");
        return ExitCode::from(2);
    };
    let token = match &args.token_file {
        None => None,
        Some(path) => match std::fs::read_to_string(path) {
            Ok(token) => Some(token.trim().to_owned()),
            Err(e) => {
                eprintln!("codemode-conformance: cannot read the token file {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let implementation: Box<dyn Implementation> = match (&args.command, &args.connect) {
        (Some(command), _) => match Subprocess::new(command, &args.engine) {
            Ok(subprocess) => Box::new(subprocess),
            Err(problem) => {
                eprintln!("codemode-conformance: {problem}");
                return ExitCode::from(2);
            }
        },
        (None, Some(address)) => {
            match runtime.block_on(Executes::connect(address, token.as_deref(), &args.engine)) {
                Ok(remote) => Box::new(remote),
                Err(problem) => {
                    eprintln!("codemode-conformance: {problem}");
                    return ExitCode::from(2);
                }
            }
        }
        (None, None) => match args.engine.parse() {
            Ok(engine) => Box::new(Executes::on(engine)),
            Err(problem) => {
                eprintln!("codemode-conformance: {problem}");
                return ExitCode::from(2);
            }
        },
    };
    let (mut passed, mut failed) = (0, 0);
    for (path, transcript) in &cases {
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let result = runtime.block_on(run_case(implementation.as_ref(), transcript));
        let known = expected.iter().find(|e| e.transcript == file);
        let list = args.expected_failures.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        let result = match judge(result, known, &list) {
            Verdict::Pass => Ok(()),
            Verdict::ExpectedFailure { reason, .. } => {
                println!("xfail {file}: {} (expected: {reason})", transcript.name);
                passed += 1;
                continue;
            }
            Verdict::Fail(failure) => Err(failure),
        };
        if args.json {
            let line = serde_json::json!({
                "file": file,
                "name": transcript.name,
                "pass": result.is_ok(),
                "failure": result.as_ref().err().map(|f| f.message.clone()),
            });
            println!("{line}");
        } else {
            match &result {
                Ok(()) => println!("pass {file}: {}", transcript.name),
                Err(failure) => println!("FAIL {file}: {}\n  {}", transcript.name, failure.message),
            }
        }
        if result.is_ok() { passed += 1 } else { failed += 1 }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
