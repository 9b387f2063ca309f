//! Confinement of process isolation's workers: what a worker locks itself into before it
//! serves (docs/security.md), and what the host checks of it from outside.
//!
//! A worker runs init, then lock: while still one thread it closes inherited descriptors,
//! sets rlimits, enters new namespaces, drops every capability, sets no-new-privileges and
//! not-dumpable and restricts itself with Landlock ([`prepare_worker`]); then the runtime
//! and engines start and warm up; then a deny-by-default seccomp allowlist goes onto every
//! thread at once ([`lock_worker`]); only then does it answer the host's hello. The host
//! reads `/proc/<pid>/status` itself rather than trusting the worker's word
//! ([`check_worker`]).

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod seccomp;

/// The environment variable through which the host tells a worker its level
/// (`required` or `best-effort`); absent means off. It is one of the few variables a
/// worker's empty environment carries.
pub const CONFINEMENT_VAR: &str = "CODEMODE_CONFINEMENT";

/// The environment variable carrying the data-segment cap, in bytes, the host sets for a
/// confined worker (above its memory ceiling).
pub const DATA_LIMIT_VAR: &str = "CODEMODE_DATA_LIMIT_BYTES";

/// Set to `off` (for example through `env` in the worker command) to skip the namespace
/// step, as where the kernel refuses unprivileged user namespaces: seccomp and Landlock
/// still hold.
pub const NAMESPACES_VAR: &str = "CODEMODE_CONFINEMENT_NAMESPACES";

/// How strictly process isolation confines its workers (`required`, `best-effort`, `off`
/// in a configuration file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Confinement {
    /// Every layer the kernel offers; a worker the host does not find under no-new-privs
    /// and a seccomp filter serves nothing, and another operating system refuses to run
    /// programs. One execution per worker, so each run pays a locked worker's start
    /// (about 5.7 ms against 0.22 ms `Off`, [`crate::ProcessExecutor`]). The default on
    /// Linux.
    Required,
    /// Every layer the kernel offers, and a worker without them still serves (a warning is
    /// logged). One execution per worker.
    BestEffort,
    /// An ordinary child process (still an empty environment and a bounded stderr),
    /// reused for the next execution after a run that ended normally. The default
    /// elsewhere.
    Off,
}

impl Default for Confinement {
    fn default() -> Confinement {
        if cfg!(target_os = "linux") { Confinement::Required } else { Confinement::Off }
    }
}

impl Confinement {
    /// Its name on the command line, in configuration files and in [`CONFINEMENT_VAR`].
    pub fn name(self) -> &'static str {
        match self {
            Confinement::Required => "required",
            Confinement::BestEffort => "best-effort",
            Confinement::Off => "off",
        }
    }

    /// Whether a worker at this level locks itself (and so serves one execution).
    pub fn confines(self) -> bool {
        self != Confinement::Off
    }
}

impl std::str::FromStr for Confinement {
    type Err = ParseConfinementError;

    fn from_str(name: &str) -> Result<Confinement, ParseConfinementError> {
        [Confinement::Required, Confinement::BestEffort, Confinement::Off]
            .into_iter()
            .find(|level| level.name() == name)
            .ok_or_else(|| ParseConfinementError { name: name.to_owned() })
    }
}

/// A name that is no [`Confinement`] level.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown confinement \"{name}\"; say required, best-effort or off")]
#[non_exhaustive]
pub struct ParseConfinementError {
    /// The name given.
    pub name: String,
}

/// Why a worker could not lock itself ([`prepare_worker`], [`lock_worker`]). Its Display
/// says which step failed, with the system's own words.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineError {
    /// Closing the descriptors inherited from the host (`close_range`) failed.
    #[error("close_range failed: {0}")]
    CloseDescriptors(#[source] std::io::Error),
    /// A resource limit could not be set.
    #[error("setrlimit({resource}) failed: {source}")]
    Rlimit {
        /// `RLIMIT_CORE`, `RLIMIT_FSIZE`, `RLIMIT_NOFILE` or `RLIMIT_DATA`.
        resource: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The capability sets could not be emptied (`capset`).
    #[error("capset failed: {0}")]
    Capabilities(#[source] std::io::Error),
    /// A `prctl` the lock needs failed.
    #[error("{option} failed: {source}")]
    Prctl {
        /// `PR_SET_PDEATHSIG`, `PR_SET_DUMPABLE` or `PR_SET_NO_NEW_PRIVS`.
        option: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The seccomp allowlist could not be compiled or applied.
    #[error("seccomp: {0}")]
    Seccomp(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Confinement `required` on an operating system without seccomp: the pinned
    /// `CONFINEMENT_UNAVAILABLE` text.
    #[error("{}", codemode_protocol::texts::CONFINEMENT_UNAVAILABLE.fill(&[NO_SECCOMP]))]
    Unavailable,
}

/// Why the host found a worker not confined ([`check_worker`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// `/proc/<pid>/task` could not be listed.
    #[error("cannot read the threads of worker {pid}: {source}")]
    Threads {
        /// The worker's process id.
        pid: u32,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A thread's `status` could not be read.
    #[error("cannot read the status of worker {pid}: {source}")]
    Status {
        /// The worker's process id.
        pid: u32,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A thread runs without no-new-privileges.
    #[error("worker {pid} runs without no-new-privileges")]
    NoNewPrivileges {
        /// The worker's process id.
        pid: u32,
    },
    /// A thread runs without the seccomp filter.
    #[error("worker {pid} runs without its seccomp filter")]
    NoSeccomp {
        /// The worker's process id.
        pid: u32,
    },
    /// The worker has no threads left (it ended).
    #[error("worker {pid} has no threads")]
    NoThreads {
        /// The worker's process id.
        pid: u32,
    },
}

/// The `why` of `CONFINEMENT_UNAVAILABLE` on an operating system other than Linux.
const NO_SECCOMP: &str = "this operating system has no seccomp";

/// The layers a worker holds after [`prepare_worker`] and [`lock_worker`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Layers {
    /// New user, network, IPC and UTS namespaces.
    pub namespaces: bool,
    /// Every capability set empty, the bounding set included.
    pub capabilities_dropped: bool,
    /// Landlock fully enforced (all filesystem and network rights handled).
    pub landlock: bool,
    /// The seccomp allowlist on every thread.
    pub seccomp: bool,
}

impl Layers {
    /// `namespaces landlock seccomp`: the layers held, for a log line.
    pub fn describe(&self) -> String {
        let held = [
            ("namespaces", self.namespaces),
            ("capabilities-dropped", self.capabilities_dropped),
            ("landlock", self.landlock),
            ("seccomp", self.seccomp),
        ];
        let names: Vec<&str> = held.iter().filter(|(_, on)| *on).map(|(name, _)| *name).collect();
        if names.is_empty() { "none".to_owned() } else { names.join(" ") }
    }
}

/// Room above what a worker holds when a run starts: the engine's heap and its budget
/// (each up to the run's memory limit), and what V8 and the runtime use beside them.
pub(crate) fn worker_room(memory_limit_bytes: usize) -> u64 {
    (memory_limit_bytes as u64).saturating_mul(2).saturating_add(256 << 20)
}

/// Cap worker `pid`'s committed memory for a run of `memory_limit_bytes` at what it holds
/// now plus [`worker_room`], so a worker whose engine outgrows its bounds (memory V8 does
/// not report) dies of it instead of growing the machine. Linux only; elsewhere nothing.
pub(crate) fn cap_worker_memory(pid: u32, memory_limit_bytes: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    return linux::cap_data(pid, worker_room(memory_limit_bytes));
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, memory_limit_bytes);
        Ok(())
    }
}

/// The level the host asked this worker for, read from [`CONFINEMENT_VAR`].
pub fn requested_level() -> Confinement {
    match std::env::var(CONFINEMENT_VAR).ok().and_then(|name| name.parse().ok()) {
        Some(level) => level,
        None => Confinement::Off,
    }
}

/// Init, the first half: call while the process has one thread, before any runtime or
/// engine starts. `data_limit_bytes` caps the data segment (above any engine limit).
/// `Err` at [`Confinement::Required`] when a step that must hold failed.
pub fn prepare_worker(level: Confinement, data_limit_bytes: u64) -> Result<Layers, ConfineError> {
    if !level.confines() {
        return Ok(Layers::default());
    }
    #[cfg(target_os = "linux")]
    {
        let namespaces = std::env::var(NAMESPACES_VAR).map_or(true, |v| v != "off");
        linux::prepare(level, data_limit_bytes, namespaces)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = data_limit_bytes;
        match level {
            Confinement::Required => Err(ConfineError::Unavailable),
            _ => Ok(Layers::default()),
        }
    }
}

/// Lock, the second half: call once the runtime and engines have started and warmed up,
/// before answering the hello. Applies the seccomp allowlist to every thread.
pub fn lock_worker(level: Confinement, mut layers: Layers) -> Result<Layers, ConfineError> {
    if !level.confines() {
        return Ok(layers);
    }
    #[cfg(target_os = "linux")]
    {
        seccomp::apply()?;
        layers.seccomp = true;
        Ok(layers)
    }
    #[cfg(not(target_os = "linux"))]
    {
        match level {
            Confinement::Required => Err(ConfineError::Unavailable),
            _ => Ok(layers),
        }
    }
}

/// Why confinement cannot hold on this operating system.
#[cfg(not(target_os = "linux"))]
pub(crate) fn unavailable() -> String {
    ConfineError::Unavailable.to_string()
}

/// What the host reads of a worker from `/proc`: `Err` with why it is not confined
/// (no-new-privs or the seccomp filter missing on one of its threads).
#[cfg(target_os = "linux")]
pub fn check_worker(pid: u32) -> Result<(), CheckError> {
    linux::check(pid)
}

/// The signal number that ended a process, if one did.
#[cfg(unix)]
pub(crate) fn killed_by_seccomp(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(libc::SIGSYS)
}

/// The seccomp allowlist as `(system call, why it is allowed)`, in its order; the same
/// reasons are in docs/security.md.
#[cfg(target_os = "linux")]
pub fn seccomp_allowlist() -> Vec<(&'static str, &'static str)> {
    seccomp::allowlist().into_iter().map(|entry| (entry.name.trim_start_matches("SYS_"), entry.why)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_level_is_refused_by_name() {
        let refused = "strict".parse::<Confinement>().unwrap_err();
        assert_eq!(refused, ParseConfinementError { name: "strict".to_owned() });
        assert_eq!(refused.to_string(), "unknown confinement \"strict\"; say required, best-effort or off");
        assert_eq!("best-effort".parse::<Confinement>(), Ok(Confinement::BestEffort));
    }

    /// The host's check says why a process is not confined: this test process has no
    /// no-new-privileges or no seccomp filter, and a process that does not exist has no
    /// threads to read.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_check_says_what_it_found_by_kind() {
        let me = std::process::id();
        // Under a container that sets both itself, this process passes: nothing to see.
        if let Err(found) = check_worker(me) {
            assert!(
                matches!(found, CheckError::NoNewPrivileges { pid } | CheckError::NoSeccomp { pid } if pid == me),
                "{found:?}"
            );
        }
        let gone = check_worker(u32::MAX).unwrap_err();
        assert!(matches!(&gone, CheckError::Threads { pid: u32::MAX, .. }), "{gone:?}");
        assert!(gone.to_string().starts_with(&format!("cannot read the threads of worker {}: ", u32::MAX)));
    }

    #[cfg(not(target_os = "linux"))]
    #[test]
    fn required_confinement_elsewhere_is_unavailable() {
        let refused = prepare_worker(Confinement::Required, 0).unwrap_err();
        assert!(matches!(refused, ConfineError::Unavailable), "{refused:?}");
        assert_eq!(refused.to_string(), unavailable());
    }
}
