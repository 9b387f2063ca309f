//! The conformance matrix: every transcript against every engine built in and every
//! transport, one named trial each (`quickjs/stdio/names-fetch`), on libtest-mimic.
//!
//! Columns: QuickJS, and V8 with the `v8` feature, then V8 again with WebAssembly on
//! (`v8+webassembly`: every implementation started with `--webassembly`). Transports: `in-process` (the
//! executor in this process), `stdio` (`codemode stdio --engine NAME`, a process per
//! case), `unix` (`codemode serve --engine NAME` on a Unix socket) and `tcp` (the same
//! on loopback TCP with a token) and `process` (the executor's process isolation, each
//! case in a confined worker of `codemode stdio`). Expected failures are data:
//! `conformance/expected-failures/<engine>.json` for every transport, and optionally
//! `<engine>.<transport>.json` for one; a listed case that passes fails its trial.
//! `expected-failures/<file>` trials check each list names transcripts that exist.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};

use codemode_conformance::{
    Executes, ExpectedFailure, Implementation, Listen, Served, Subprocess, Transcript, Verdict, judge,
    load_dir, load_expected_failures, run_case,
};
use codemode_executor::{Confinement, EngineKind, ExecutorConfig, ProcessExecutor, WorkerCommand};
use libtest_mimic::{Arguments, Failed, Trial};

/// How the implementation under test is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Transport {
    InProcess,
    Stdio,
    Unix,
    Tcp,
    /// The executor's process isolation, its workers confined (`Confinement::Required`).
    Process,
}

impl Transport {
    const ALL: [Transport; 5] =
        [Transport::InProcess, Transport::Stdio, Transport::Unix, Transport::Tcp, Transport::Process];

    fn name(self) -> &'static str {
        match self {
            Transport::InProcess => "in-process",
            Transport::Stdio => "stdio",
            Transport::Unix => "unix",
            Transport::Tcp => "tcp",
            Transport::Process => "process",
        }
    }
}

fn conformance_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The list of `name` under `conformance/expected-failures/`, as the path a trial names.
fn list_path(name: &str) -> (PathBuf, String) {
    (conformance_dir().join("expected-failures").join(name), format!("conformance/expected-failures/{name}"))
}

/// A column of the matrix: an engine, and whether its runs have `WebAssembly`
/// (`v8+webassembly`: every transcript again with it on, to show the rest is unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Column {
    engine: EngineKind,
    web_assembly: bool,
}

impl Column {
    /// Every engine built in, then each that has WebAssembly again with it on.
    fn all() -> Vec<Column> {
        let plain = EngineKind::BUILT_IN.iter().map(|&engine| Column { engine, web_assembly: false });
        let with = EngineKind::BUILT_IN
            .iter()
            .filter(|engine| engine.has_web_assembly())
            .map(|&engine| Column { engine, web_assembly: true });
        plain.chain(with).collect()
    }

    fn name(self) -> String {
        let suffix = if self.web_assembly { "+webassembly" } else { "" };
        format!("{}{suffix}", self.engine.name())
    }

    /// The flags of `codemode stdio` and `codemode serve` for this column.
    fn flags(self) -> &'static [&'static str] {
        if self.web_assembly { &["--webassembly"] } else { &[] }
    }
}

/// An implementation started on first use (or why it could not start), shared by its trials.
type Started = Arc<OnceLock<Result<Arc<dyn Implementation>, String>>>;

/// One implementation per engine and transport, started on first use and shared by its
/// trials; daemons are killed when the matrix is dropped.
struct Matrix {
    runtime: tokio::runtime::Runtime,
    codemode: OnceLock<Result<PathBuf, String>>,
    implementations: Mutex<HashMap<(Column, Transport), Started>>,
}

impl Matrix {
    fn new() -> Matrix {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("the async runtime starts");
        Matrix { runtime, codemode: OnceLock::new(), implementations: Mutex::new(HashMap::new()) }
    }

    /// The `codemode` binary of this build (with V8 when this test has it), built by a
    /// nested `cargo build` the first time a trial needs it, so it is never stale.
    fn codemode(&self) -> Result<PathBuf, String> {
        self.codemode.get_or_init(build_codemode).clone()
    }

    fn implementation(
        &self,
        column: Column,
        transport: Transport,
    ) -> Result<Arc<dyn Implementation>, String> {
        let cell = self
            .implementations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((column, transport))
            .or_default()
            .clone();
        cell.get_or_init(|| self.start(column, transport)).clone()
    }

    fn start(&self, column: Column, transport: Transport) -> Result<Arc<dyn Implementation>, String> {
        let engine = column.engine;
        let scratch = std::env::temp_dir().join(format!(
            "codemode-conformance-{}-{}",
            std::process::id(),
            column.name()
        ));
        let config = ExecutorConfig::default().engine(engine).web_assembly(column.web_assembly);
        Ok(match transport {
            Transport::InProcess => {
                let _inside = self.runtime.enter();
                let name = format!("built-in on {}, in-process", column.name());
                Arc::new(Executes::new(name, engine.name(), codemode_executor::Executor::new(config)))
            }
            Transport::Stdio => Arc::new(
                column
                    .flags()
                    .iter()
                    .fold(Subprocess::codemode_stdio(&self.codemode()?, engine), |s, f| s.arg(f)),
            ),
            Transport::Unix => {
                let listen = Listen::Unix(scratch.with_extension("sock"));
                let codemode = self.codemode()?;
                let served = Served::start_with(&codemode, engine, listen, column.flags());
                Arc::new(self.runtime.block_on(served)?)
            }
            Transport::Tcp => {
                let listen = Listen::Tcp {
                    token: "conformance".to_owned(),
                    token_file: scratch.with_extension("token"),
                };
                let codemode = self.codemode()?;
                let served = Served::start_with(&codemode, engine, listen, column.flags());
                Arc::new(self.runtime.block_on(served)?)
            }
            Transport::Process => {
                let _inside = self.runtime.enter();
                let args = ["stdio", "--engine", engine.name()].map(str::to_owned).to_vec();
                let command = WorkerCommand::new(self.codemode()?, args);
                let config = config.confinement(Confinement::Required);
                let name = format!("built-in on {}, process isolation, confined", column.name());
                Arc::new(Executes::new(name, engine.name(), ProcessExecutor::new(config, command)))
            }
        })
    }

    fn run(
        &self,
        column: Column,
        transport: Transport,
        transcript: &Transcript,
        known: Option<&ExpectedFailure>,
        list: &str,
    ) -> Result<(), Failed> {
        let implementation = self
            .implementation(column, transport)
            .map_err(|problem| format!("cannot start {}/{}: {problem}", column.name(), transport.name()))?;
        let result = self.runtime.block_on(run_case(implementation.as_ref(), transcript));
        match judge(result, known, list) {
            Verdict::Pass | Verdict::ExpectedFailure { .. } => Ok(()),
            Verdict::Fail(failure) => Err(format!("{}: {}", implementation.name(), failure.message).into()),
        }
    }

    /// Drop every implementation (killing the daemons) inside the runtime, then the runtime.
    fn shut_down(self) {
        let _inside = self.runtime.enter();
        self.implementations.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

fn build_codemode() -> Result<PathBuf, String> {
    codemode_devtools::codemode_binary(if cfg!(feature = "v8") { &["v8"] } else { &[] })
}

/// The list at `name`, and a trial checking that it names transcripts of the suite, once
/// each, with a reason. A missing file is an empty list only where `optional`.
fn expected_failures(
    name: &str,
    optional: bool,
    suite: &[(String, Transcript)],
) -> (Vec<ExpectedFailure>, String, Option<Trial>) {
    let (path, shown) = list_path(name);
    if optional && !path.exists() {
        return (Vec::new(), shown, None);
    }
    let loaded = load_expected_failures(&path);
    let files: Vec<String> = suite.iter().map(|(file, _)| format!("{file}.json")).collect();
    let check_shown = shown.clone();
    let check = {
        let loaded = loaded.clone();
        Trial::test(format!("expected-failures/{name}"), move || {
            let list = loaded?;
            let mut problems = Vec::new();
            for (index, entry) in list.iter().enumerate() {
                if !files.contains(&entry.transcript) {
                    problems.push(format!("{:?} is not a transcript of the suite", entry.transcript));
                }
                if list[..index].iter().any(|earlier| earlier.transcript == entry.transcript) {
                    problems.push(format!("{:?} is listed twice", entry.transcript));
                }
                if entry.reason.trim().is_empty() {
                    problems.push(format!("{:?} gives no reason", entry.transcript));
                }
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(format!("{check_shown}: {}", problems.join("; ")).into())
            }
        })
    };
    (loaded.unwrap_or_default(), shown, Some(check))
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // Trials mostly wait (each listens 100 ms for stray calls after its outcome), so by
    // default several run per core; `--test-threads` or RUST_TEST_THREADS sets it.
    if args.test_threads.is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        args.test_threads =
            Some(std::env::var("RUST_TEST_THREADS").ok().and_then(|n| n.parse().ok()).unwrap_or(cores * 4));
    }
    let suite: Vec<(String, Transcript)> = match load_dir(&conformance_dir().join("transcripts")) {
        Ok(found) => found
            .into_iter()
            .map(|(path, transcript)| {
                (path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(), transcript)
            })
            .collect(),
        Err(problem) => {
            eprintln!("the conformance suite does not load: {problem}");
            return ExitCode::FAILURE;
        }
    };
    let matrix = Arc::new(Matrix::new());
    let mut trials = Vec::new();
    for column in Column::all() {
        let (for_engine, engine_list, check) =
            expected_failures(&format!("{}.json", column.name()), false, &suite);
        trials.extend(check);
        for transport in Transport::ALL {
            let (for_transport, transport_list, check) =
                expected_failures(&format!("{}.{}.json", column.name(), transport.name()), true, &suite);
            trials.extend(check);
            for (file, transcript) in &suite {
                let named = format!("{file}.json");
                let (known, list) = match for_transport.iter().find(|e| e.transcript == named) {
                    Some(known) => (Some(known.clone()), transport_list.clone()),
                    None => (for_engine.iter().find(|e| e.transcript == named).cloned(), engine_list.clone()),
                };
                let xfail = known.is_some();
                let (matrix, transcript) = (matrix.clone(), transcript.clone());
                let trial =
                    Trial::test(format!("{}/{}/{file}", column.name(), transport.name()), move || {
                        matrix.run(column, transport, &transcript, known.as_ref(), &list)
                    });
                trials.push(if xfail { trial.with_kind("xfail") } else { trial });
            }
        }
    }
    let conclusion = libtest_mimic::run(&args, trials);
    if let Ok(matrix) = Arc::try_unwrap(matrix) {
        matrix.shut_down();
    }
    conclusion.exit_code()
}
