//! Limits and executor settings: every knob has a default, a minimum and a ceiling here;
//! a request may override a limit within them.

use std::time::Duration;

use codemode_protocol::texts::{LIMIT_ABOVE_CEILING, LIMIT_TOO_SMALL, V8_NOT_BUILT};

/// The bounds one execution runs within.
///
/// Marked `#[non_exhaustive]`: start from [`Limits::default`] and set the fields you
/// change (`let mut limits = Limits::default(); limits.timeout = ...;`), or chain the
/// setters of the same names (`Limits::default().max_result_bytes(1024)`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The CPU time the run's engine thread may spend on it, read from that thread's own
    /// clock: waiting (on a call, a fetch, a timer) is not counted, nor is a neighbour's
    /// work. Past it the run ends with kind `cpuTime`. `None`: no CPU budget (the wall
    /// clock, `timeout`, still holds). As a ceiling, `None` allows any budget.
    pub cpu_time_limit: Option<Duration>,
    /// How many calls (tool calls and fetches together) one run may make; the call over
    /// it never reaches the host and the run ends with kind `callLimit`. `None`: no bound.
    /// As a ceiling, `None` allows any bound.
    pub max_calls: Option<usize>,
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
            cpu_time_limit: None,
            max_calls: None,
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
        cpu_time_limit: Some(Duration::from_millis(1)),
        max_calls: Some(0),
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
            cpu_time_limit: None,
            max_calls: None,
        }
    }

    /// Each limit with its wire name, its value as written (`None`: unset), and the minimum
    /// and ceiling (`u128::MAX` where the ceiling is unset).
    fn named<'a>(&'a self, ceilings: &'a Limits) -> [(&'static str, Option<u128>, u128, u128); 9] {
        let m = &Limits::MINIMUMS;
        let n = |v: usize| v as u128;
        let ms = |d: Duration| d.as_millis();
        let or_max = |v: Option<u128>| v.unwrap_or(u128::MAX);
        [
            ("timeoutMs", Some(ms(self.timeout)), ms(m.timeout), ms(ceilings.timeout)),
            (
                "memoryLimitBytes",
                Some(n(self.memory_limit_bytes)),
                n(m.memory_limit_bytes),
                n(ceilings.memory_limit_bytes),
            ),
            (
                "stackLimitBytes",
                Some(n(self.stack_limit_bytes)),
                n(m.stack_limit_bytes),
                n(ceilings.stack_limit_bytes),
            ),
            (
                "maxPayloadBytes",
                Some(n(self.max_payload_bytes)),
                n(m.max_payload_bytes),
                n(ceilings.max_payload_bytes),
            ),
            (
                "maxResultBytes",
                Some(n(self.max_result_bytes)),
                n(m.max_result_bytes),
                n(ceilings.max_result_bytes),
            ),
            ("maxLogBytes", Some(n(self.max_log_bytes)), n(m.max_log_bytes), n(ceilings.max_log_bytes)),
            (
                "maxCallsInFlight",
                Some(n(self.max_calls_in_flight)),
                n(m.max_calls_in_flight),
                n(ceilings.max_calls_in_flight),
            ),
            (
                "cpuTimeLimitMs",
                self.cpu_time_limit.map(ms),
                m.cpu_time_limit.map_or(0, ms),
                or_max(ceilings.cpu_time_limit.map(ms)),
            ),
            ("maxCalls", self.max_calls.map(n), m.max_calls.map_or(0, n), or_max(ceilings.max_calls.map(n))),
        ]
    }

    /// `Err` names the first limit below its minimum or above its ceiling; its Display is
    /// the refusal's pinned text ([`LIMIT_TOO_SMALL`], [`LIMIT_ABOVE_CEILING`]).
    pub fn check(&self, ceilings: &Limits) -> Result<(), LimitError> {
        for (limit, value, minimum, ceiling) in self.named(ceilings) {
            let Some(value) = value else { continue };
            if value < minimum {
                return Err(LimitError::TooSmall { limit, value, minimum });
            }
            if value > ceiling {
                return Err(LimitError::AboveCeiling { limit, value, ceiling });
            }
        }
        Ok(())
    }
}

/// Builder-style setters, one per field: `Limits::default().timeout(d).max_log_bytes(n)`.
macro_rules! setters {
    ($type:ty { $($(#[$doc:meta])* $field:ident: $value:ty),* $(,)? }) => {
        impl $type {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $field(mut self, $field: $value) -> $type {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
pub(crate) use setters;

setters!(Limits {
    /// With this wall-clock limit.
    timeout: Duration,
    /// With this memory limit, in bytes.
    memory_limit_bytes: usize,
    /// With this stack limit, in bytes.
    stack_limit_bytes: usize,
    /// With this bound on one call's payload.
    max_payload_bytes: usize,
    /// With this bound on the result.
    max_result_bytes: usize,
    /// With this bound on the logs.
    max_log_bytes: usize,
    /// With this bound on calls in flight.
    max_calls_in_flight: usize,
    /// With this CPU time budget (`None`: none).
    cpu_time_limit: Option<Duration>,
    /// With this bound on the calls of one run (`None`: none).
    max_calls: Option<usize>,
});

/// Why [`Limits::check`] refused a limit. Its Display is the pinned text a request out of
/// bounds ends with (kind `invalid`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// Below the least an execution runs with ([`Limits::MINIMUMS`]): [`LIMIT_TOO_SMALL`].
    #[error("{}", LIMIT_TOO_SMALL.fill(&[limit, &value.to_string(), &minimum.to_string()]))]
    TooSmall {
        /// The limit's wire name, `memoryLimitBytes` say.
        limit: &'static str,
        /// What was asked for (milliseconds for `timeoutMs`).
        value: u128,
        /// The least allowed.
        minimum: u128,
    },
    /// Above the executor's ceiling: [`LIMIT_ABOVE_CEILING`].
    #[error("{}", LIMIT_ABOVE_CEILING.fill(&[limit, &value.to_string(), &ceiling.to_string()]))]
    AboveCeiling {
        /// The limit's wire name, `timeoutMs` say.
        limit: &'static str,
        /// What was asked for (milliseconds for `timeoutMs`).
        value: u128,
        /// The most allowed.
        ceiling: u128,
    },
}

/// The JavaScript engine executions run on.
///
/// Every variant exists in every build, so code naming `EngineKind::V8` compiles whatever
/// features are on (a `match` outside this crate still needs a `_` arm);
/// [`EngineKind::BUILT_IN`] says which engines this build has. An executor configured with
/// an engine not built in refuses each execution (kind `invalid`, [`V8_NOT_BUILT`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EngineKind {
    /// QuickJS through rquickjs: light, fast to start, the default.
    #[default]
    QuickJs,
    /// V8 through the `v8` crate: a JIT for compute-heavy programs. Built in with the
    /// cargo feature `v8` only.
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
            EngineKind::V8 => "v8",
        }
    }

    /// Whether this build has the engine ([`EngineKind::BUILT_IN`] holds it).
    pub fn is_built_in(self) -> bool {
        EngineKind::BUILT_IN.contains(&self)
    }

    /// Whether runs on this engine can have `WebAssembly` ([`ExecutorConfig::web_assembly`]).
    pub fn has_web_assembly(self) -> bool {
        self == EngineKind::V8
    }

    /// Why an execution on this engine cannot run in this build: the pinned text of the
    /// outcome, or `None` when the engine is built in.
    pub(crate) fn not_built_text(self) -> Option<&'static str> {
        if self.is_built_in() {
            return None;
        }
        match self {
            EngineKind::V8 => Some(V8_NOT_BUILT),
            EngineKind::QuickJs => None,
        }
    }
}

impl std::str::FromStr for EngineKind {
    type Err = ParseEngineError;

    /// `quickjs`, or `v8` in a build with the feature; an engine this build lacks is
    /// refused by name.
    fn from_str(name: &str) -> Result<EngineKind, ParseEngineError> {
        if let Some(&kind) = EngineKind::BUILT_IN.iter().find(|kind| kind.name() == name) {
            return Ok(kind);
        }
        Err(match name {
            "v8" => ParseEngineError::NotBuiltIn { engine: EngineKind::V8 },
            _ => ParseEngineError::Unknown { name: name.to_owned() },
        })
    }
}

/// Why a name is not an engine of this build ([`EngineKind`]'s `FromStr`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseEngineError {
    /// An engine this executor knows, left out of this build (`v8` without the feature).
    #[error("this build has no V8 engine: build with `--features v8`; built in: {}", built_in())]
    NotBuiltIn {
        /// The engine asked for.
        engine: EngineKind,
    },
    /// No engine has this name.
    #[error("unknown engine \"{name}\"; built in: {}", built_in())]
    Unknown {
        /// The name given.
        name: String,
    },
}

/// The names of the engines built in, for a refusal: `quickjs, v8`.
fn built_in() -> String {
    EngineKind::BUILT_IN.iter().map(|kind| kind.name()).collect::<Vec<_>>().join(", ")
}

/// The command that starts one worker process speaking the wire protocol on stdio.
/// Made with [`WorkerCommand::new`] (it is `#[non_exhaustive]`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerCommand {
    /// The program, usually the `codemode` binary.
    pub program: std::path::PathBuf,
    /// Its arguments, usually `["stdio"]`.
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// `program` with `args`, usually the `codemode` binary with `["stdio"]`.
    pub fn new<I, S>(program: impl Into<std::path::PathBuf>, args: I) -> WorkerCommand
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        WorkerCommand { program: program.into(), args: args.into_iter().map(Into::into).collect() }
    }
}

/// How the built-in executor runs its executions: in this process ([`crate::Executor`]) or
/// in worker processes ([`crate::ProcessExecutor`]), each configured by one of these.
///
/// Marked `#[non_exhaustive]`: start from [`ExecutorConfig::default`] and set what you
/// change, as fields (`config.workers = 4;`) or with the setters of the same names
/// (`ExecutorConfig::default().workers(4).engine(EngineKind::QuickJs)`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// start on every run: about 5.7 ms for `async () => 1` against 0.22 ms with `Off`
    /// and 0.09 ms in-process on the project's 2-vCPU machine (the table on
    /// [`crate::ProcessExecutor`]). Nothing confines in-process executions;
    /// [`crate::Executor`] ignores it.
    pub confinement: crate::Confinement,
    /// How long an execution's thread waits awake for a call's answer before it sleeps
    /// (default 50 µs, at most 1 ms is used, zero never waits awake), once per call made
    /// or answer taken. An answer that comes in that time costs no wake-up of a sleeping
    /// thread, about 20 µs on a VM. The thread offers its CPU to any thread runnable on it
    /// as it waits, and at most one thread fewer than the CPUs this process may use waits
    /// awake at once; the time counts against a CPU quota. Process isolation's workers
    /// get the host's setting, and each worker process has its own bound.
    pub answer_spin: Duration,
    /// Put `WebAssembly` on every run's global unless its request says otherwise
    /// ([`crate::Request::web_assembly`]); off by default. V8 only: on QuickJS every
    /// execution asking for it is refused (`texts::WEB_ASSEMBLY_NEEDS_V8`).
    pub web_assembly: bool,
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
            web_assembly: false,
        }
    }
}

setters!(ExecutorConfig {
    /// With this many execution threads (or worker processes) kept ready.
    workers: usize,
    /// With these limits for requests that do not override them.
    limits: Limits,
    /// With these ceilings on what a request may ask for.
    ceilings: Limits,
    /// On this engine.
    engine: EngineKind,
    /// With this confinement of process isolation's workers.
    confinement: crate::Confinement,
    /// With this wait awake for a call's answer.
    answer_spin: Duration,
    /// With `WebAssembly` on every run's global (V8 only).
    web_assembly: bool,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_out_of_bounds_is_refused_by_kind_with_its_pinned_text() {
        let ceilings = Limits::default_ceilings();
        let small = Limits::default().memory_limit_bytes(1024).check(&ceilings).unwrap_err();
        assert_eq!(small, LimitError::TooSmall { limit: "memoryLimitBytes", value: 1024, minimum: 1 << 20 });
        assert_eq!(
            small.to_string(),
            "The memoryLimitBytes of 1024 is below the minimum of 1048576; ask for at least 1048576."
        );
        let long = Limits::default().timeout(Duration::from_secs(3600)).check(&ceilings).unwrap_err();
        assert_eq!(long, LimitError::AboveCeiling { limit: "timeoutMs", value: 3_600_000, ceiling: 900_000 });
        assert_eq!(
            long.to_string(),
            "The timeoutMs of 3600000 is above this executor's ceiling of 900000; ask for at most 900000."
        );
        assert_eq!(Limits::default().check(&ceilings), Ok(()));
    }

    #[test]
    fn an_engine_name_parses_as_before() {
        assert_eq!("quickjs".parse::<EngineKind>(), Ok(EngineKind::QuickJs));
        let unknown = "spidermonkey".parse::<EngineKind>().unwrap_err();
        assert!(matches!(unknown, ParseEngineError::Unknown { .. }), "{unknown:?}");
        assert!(unknown.to_string().starts_with("unknown engine \"spidermonkey\"; built in: quickjs"));
        assert_eq!(EngineKind::V8.name(), "v8");
        if cfg!(feature = "v8") {
            assert_eq!("v8".parse::<EngineKind>(), Ok(EngineKind::V8));
            assert_eq!(EngineKind::V8.not_built_text(), None);
        } else {
            let refused = "v8".parse::<EngineKind>().unwrap_err();
            assert_eq!(refused, ParseEngineError::NotBuiltIn { engine: EngineKind::V8 });
            assert_eq!(
                refused.to_string(),
                "this build has no V8 engine: build with `--features v8`; built in: quickjs"
            );
            assert!(!EngineKind::V8.is_built_in());
            assert_eq!(EngineKind::V8.not_built_text(), Some(V8_NOT_BUILT));
        }
    }
}
