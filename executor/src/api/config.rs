//! Limits and executor settings: every knob has a default, a minimum and a ceiling here;
//! a request may override a limit within them.

use std::time::Duration;

/// The bounds one execution runs within.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit, from `execute` to the outcome.
    pub timeout: Duration,
    /// The engine's memory limit, in bytes.
    pub memory_limit_bytes: usize,
    /// The engine's stack limit, in bytes; deep recursion past it is a catchable error.
    pub stack_limit_bytes: usize,
    /// Bound on provider + tool + argsJson of one call, measured before it leaves.
    pub max_payload_bytes: usize,
    /// Bound on the result in the codec's JSON form.
    pub max_result_bytes: usize,
    /// Bound on the bytes of all log lines together; past it logs stop with a marker line.
    pub max_log_bytes: usize,
    /// Bound on tool and fetch calls awaiting an answer at once.
    pub max_calls_in_flight: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeout: Duration::from_secs(30),
            memory_limit_bytes: 64 << 20,
            stack_limit_bytes: 1 << 20,
            max_payload_bytes: 8 << 20,
            max_result_bytes: 8 << 20,
            max_log_bytes: 1 << 20,
            max_calls_in_flight: 256,
        }
    }
}

impl Limits {
    /// The least of each limit an execution can run with; a request below one is refused.
    pub const MINIMUMS: Limits = Limits {
        timeout: Duration::from_millis(1),
        memory_limit_bytes: 1 << 20,
        stack_limit_bytes: 32 << 10,
        max_payload_bytes: 0,
        max_result_bytes: 0,
        max_log_bytes: 0,
        max_calls_in_flight: 0,
    };

    /// The default ceilings: what a request may ask for unless the executor's config says less.
    pub fn default_ceilings() -> Limits {
        Limits {
            timeout: Duration::from_secs(15 * 60),
            memory_limit_bytes: 4 << 30,
            stack_limit_bytes: 256 << 20,
            max_payload_bytes: 256 << 20,
            max_result_bytes: 256 << 20,
            max_log_bytes: 64 << 20,
            max_calls_in_flight: 65_536,
        }
    }

    /// Each limit with its wire name, its value as written, and the minimum and ceiling.
    fn named<'a>(&'a self, ceilings: &'a Limits) -> [(&'static str, u128, u128, u128); 7] {
        let m = &Limits::MINIMUMS;
        let n = |v: usize| v as u128;
        [
            ("timeoutMs", self.timeout.as_millis(), m.timeout.as_millis(), ceilings.timeout.as_millis()),
            (
                "memoryLimitBytes",
                n(self.memory_limit_bytes),
                n(m.memory_limit_bytes),
                n(ceilings.memory_limit_bytes),
            ),
            (
                "stackLimitBytes",
                n(self.stack_limit_bytes),
                n(m.stack_limit_bytes),
                n(ceilings.stack_limit_bytes),
            ),
            (
                "maxPayloadBytes",
                n(self.max_payload_bytes),
                n(m.max_payload_bytes),
                n(ceilings.max_payload_bytes),
            ),
            ("maxResultBytes", n(self.max_result_bytes), n(m.max_result_bytes), n(ceilings.max_result_bytes)),
            ("maxLogBytes", n(self.max_log_bytes), n(m.max_log_bytes), n(ceilings.max_log_bytes)),
            (
                "maxCallsInFlight",
                n(self.max_calls_in_flight),
                n(m.max_calls_in_flight),
                n(ceilings.max_calls_in_flight),
            ),
        ]
    }

    /// `Err` with the text of the first limit below its minimum or above its ceiling.
    pub fn check(&self, ceilings: &Limits) -> Result<(), String> {
        use codemode_protocol::texts::{LIMIT_ABOVE_CEILING, LIMIT_TOO_SMALL};
        for (name, value, minimum, ceiling) in self.named(ceilings) {
            let (shown, minimum_text, ceiling_text) =
                (value.to_string(), minimum.to_string(), ceiling.to_string());
            if value < minimum {
                return Err(LIMIT_TOO_SMALL.fill(&[name, &shown, &minimum_text, &minimum_text]));
            }
            if value > ceiling {
                return Err(LIMIT_ABOVE_CEILING.fill(&[name, &shown, &ceiling_text, &ceiling_text]));
            }
        }
        Ok(())
    }
}

/// The JavaScript engine executions run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// QuickJS through rquickjs: light, fast to start, the default.
    #[default]
    QuickJs,
    /// V8 through the `v8` crate (cargo feature `v8`): a JIT for compute-heavy programs.
    #[cfg(feature = "v8")]
    V8,
}

impl EngineKind {
    /// The engines this build has, QuickJS first.
    pub const BUILT_IN: &'static [EngineKind] = &[
        EngineKind::QuickJs,
        #[cfg(feature = "v8")]
        EngineKind::V8,
    ];

    /// Its name on the command line and in texts: `quickjs`, `v8`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::QuickJs => "quickjs",
            #[cfg(feature = "v8")]
            EngineKind::V8 => "v8",
        }
    }
}

impl std::str::FromStr for EngineKind {
    type Err = String;

    fn from_str(name: &str) -> Result<EngineKind, String> {
        EngineKind::BUILT_IN.iter().copied().find(|kind| kind.name() == name).ok_or_else(|| {
            let known: Vec<&str> = EngineKind::BUILT_IN.iter().map(|kind| kind.name()).collect();
            if name == "v8" {
                format!(
                    "this build has no V8 engine: build with `--features v8`; built in: {}",
                    known.join(", ")
                )
            } else {
                format!("unknown engine \"{name}\"; built in: {}", known.join(", "))
            }
        })
    }
}

/// The command that starts one worker process speaking the wire protocol on stdio.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The program, usually the `codemode` binary.
    pub program: std::path::PathBuf,
    /// Its arguments, usually `["stdio"]`.
    pub args: Vec<String>,
}

/// How the built-in executor runs its executions: in this process ([`crate::Executor`]) or
/// in worker processes ([`crate::ProcessExecutor`]), each configured by one of these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Execution threads kept ready with a blank engine (more start on demand, one per
    /// live execution), or with process isolation, worker processes kept ready; defaults
    /// to the machine's parallelism.
    pub workers: usize,
    /// Limits for requests that do not override them.
    pub limits: Limits,
    /// The most a request may ask for; a request above one is refused with a clear text.
    pub ceilings: Limits,
    /// The engine every execution runs on.
    pub engine: EngineKind,
    /// How a [`crate::ProcessExecutor`]'s workers are confined (docs/security.md):
    /// `Required` by default on Linux, which locks a worker per execution and costs its
    /// start on every run (docs/daemon.md has the figures). Nothing confines in-process
    /// executions; [`crate::Executor`] ignores it.
    pub confinement: crate::Confinement,
    /// How long an execution's thread waits awake for a call's answer before it sleeps
    /// (default 50 µs, at most 1 ms is used, zero never waits awake), once per call made
    /// or answer taken. An answer that comes in that time costs no wake-up of a sleeping
    /// thread, about 20 µs on a VM. The thread offers its CPU to any thread runnable on it
    /// as it waits, and at most one thread fewer than the CPUs this process may use waits
    /// awake at once; the time counts against a CPU quota. Process isolation's workers
    /// get the host's setting, and each worker process has its own bound.
    pub answer_spin: Duration,
}

/// [`ExecutorConfig::answer_spin`] by default: a call answered over a daemon's Unix socket
/// or a worker's pipes on the project's machine comes back in 25 to 45 µs.
pub const DEFAULT_ANSWER_SPIN: Duration = Duration::from_micros(50);

impl Default for ExecutorConfig {
    fn default() -> ExecutorConfig {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        ExecutorConfig {
            workers,
            limits: Limits::default(),
            ceilings: Limits::default_ceilings(),
            engine: EngineKind::default(),
            confinement: crate::Confinement::default(),
            answer_spin: DEFAULT_ANSWER_SPIN,
        }
    }
}
