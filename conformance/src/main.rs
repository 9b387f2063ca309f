//! `codemode-conformance`: run golden transcripts against an executor and report.
//!
//! Exit status: 0 when every case passes, 1 when any fails, 2 for bad usage or an
//! unreadable transcript (the file is named).

use std::path::PathBuf;
use std::process::ExitCode;

use codemode_conformance::{
    ExpectedFailure, Implementation, InProcess, Remote, Subprocess, Verdict, judge, load_dir,
    load_expected_failures, run_case,
};

const USAGE: &str = "usage: codemode-conformance [--transcripts DIR]... [--executor-cmd \"CMD ARGS\" | --connect ADDRESS [--token-file FILE]] [--engine NAME] [--json]
  --transcripts DIR   a directory of transcript files (*.json); may be given several times
                      (default: the suite in conformance/transcripts)
  --executor-cmd CMD  a program speaking the wire protocol on stdin/stdout (default: the built-in executor in-process)
  --connect ADDRESS   a daemon (codemode serve) at unix:PATH or tcp:HOST:PORT
  --token-file FILE   the daemon's token
  --engine NAME       the engine it runs on, for engine-specific outcomes (default: quickjs); in-process,
                      the engine the built-in executor runs (quickjs, or v8 in a build with it)
  --expected-failures FILE
                      a JSON list of {\"transcript\": file name, \"reason\": why} this implementation is
                      known to fail; such a case that passes fails the run, so the list cannot go stale
  --json              one JSON object per case instead of text lines";

struct Args {
    dirs: Vec<PathBuf>,
    command: Option<String>,
    engine: String,
    json: bool,
    expected_failures: Option<PathBuf>,
    connect: Option<String>,
    token_file: Option<PathBuf>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        dirs: Vec::new(),
        command: None,
        engine: "quickjs".to_owned(),
        json: false,
        expected_failures: None,
        connect: None,
        token_file: None,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match arg.as_str() {
            "--transcripts" => parsed.dirs.push(PathBuf::from(value("--transcripts")?)),
            "--executor-cmd" => parsed.command = Some(value("--executor-cmd")?),
            "--engine" => parsed.engine = value("--engine")?,
            "--json" => parsed.json = true,
            "--connect" => parsed.connect = Some(value("--connect")?),
            "--token-file" => parsed.token_file = Some(PathBuf::from(value("--token-file")?)),
            "--expected-failures" => {
                parsed.expected_failures = Some(PathBuf::from(value("--expected-failures")?))
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if parsed.command.is_some() && parsed.connect.is_some() {
        return Err("give --executor-cmd or --connect, not both".to_owned());
    }
    if parsed.dirs.is_empty() {
        parsed.dirs.push(PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/transcripts")));
    }
    Ok(parsed)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("codemode-conformance: {problem}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
            match runtime.block_on(Remote::connect(address, token.as_deref(), &args.engine)) {
                Ok(remote) => Box::new(remote),
                Err(problem) => {
                    eprintln!("codemode-conformance: {problem}");
                    return ExitCode::from(2);
                }
            }
        }
        (None, None) => match args.engine.parse() {
            Ok(engine) => Box::new(InProcess::with_engine(engine)),
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
