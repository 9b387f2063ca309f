//! The seccomp-bpf allowlist of a confined worker, as data: each system call an engine, the
//! allocator, the async runtime or the standard library needs after start-up, with the
//! reason, and argument rules where an argument says what the call would reach.
//!
//! Three filters, applied in this order to every thread at once (TSYNC). The kernel runs
//! them all and takes the strictest answer, so: file look-ups get `EACCES` (lazy library
//! probes fail softly), `clone3` gets `ENOSYS` (so the C library falls back to `clone`,
//! whose flags a filter can read), and everything not on the allowlist kills the process.
//! Another architecture's entry points (i386 through `int 0x80`) fail the filter's
//! architecture check and kill too; x32 numbers (bit 30 set) match no entry.

use std::collections::BTreeMap;

use super::ConfineError;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

/// What an entry allows of its call.
pub(crate) enum Rule {
    /// Any arguments.
    Any,
    /// `clone` only as `pthread_create` makes a thread: same memory, files, handlers and
    /// thread group, and none of the namespace, vfork or ptrace flags.
    ThreadClone,
    /// `mmap` only private and anonymous: never shared, never file-backed.
    PrivateAnonymousMap,
    /// The first argument is this process's own id (signals to itself only).
    OwnProcess,
    /// `prctl` only with these options.
    PrctlOptions(&'static [u64]),
}

/// One allowed call with its reason.
pub(crate) struct Entry {
    pub(crate) name: &'static str,
    pub(crate) number: i64,
    pub(crate) rule: Rule,
    pub(crate) why: &'static str,
}

macro_rules! entry {
    ($name:ident, $rule:expr, $why:literal) => {
        Entry { name: stringify!($name), number: libc::$name, rule: $rule, why: $why }
    };
}

/// PR_SET_VMA: glibc and V8 name anonymous mappings (`PR_SET_VMA_ANON_NAME`).
const PR_SET_VMA: u64 = 0x5356_4d41;

/// The allowlist. docs/security.md lists it with the same reasons.
pub(crate) fn allowlist() -> Vec<Entry> {
    use Rule::*;
    vec![
        entry!(SYS_read, Any, "stdin (the host's messages) and the runtime's wakers"),
        entry!(SYS_write, Any, "stdout (outcomes, calls) and the runtime's wakers"),
        entry!(SYS_readv, Any, "vectored reads of the same descriptors"),
        entry!(SYS_writev, Any, "vectored writes of the same descriptors"),
        entry!(SYS_shutdown, Any, "a socket stdout shut down for writing at the end (a host's socket pair)"),
        entry!(SYS_close, Any, "descriptors the runtime opened before the lock"),
        entry!(SYS_fcntl, Any, "the runtime reads and sets its descriptors' flags"),
        entry!(SYS_epoll_wait, Any, "the async runtime's event loop"),
        entry!(SYS_epoll_pwait, Any, "the async runtime's event loop"),
        entry!(SYS_epoll_pwait2, Any, "the async runtime's event loop"),
        entry!(SYS_epoll_ctl, Any, "the async runtime registers stdio"),
        entry!(SYS_poll, Any, "blocking waits on stdio"),
        entry!(SYS_ppoll, Any, "blocking waits on stdio"),
        entry!(SYS_futex, Any, "locks, condition variables, thread joins"),
        entry!(SYS_sched_yield, Any, "spin locks of the allocator and V8; a wait for an answer"),
        entry!(SYS_sched_getaffinity, Any, "thread pools size themselves"),
        entry!(SYS_sched_getparam, Any, "V8's threads read their own priority (a query)"),
        entry!(SYS_sched_getscheduler, Any, "V8's threads read their own scheduling policy (a query)"),
        entry!(SYS_nanosleep, Any, "sleeps"),
        entry!(SYS_clock_nanosleep, Any, "sleeps"),
        entry!(SYS_clock_gettime, Any, "the clock when the vDSO falls back to the kernel"),
        entry!(SYS_clock_getres, Any, "the clock's resolution"),
        entry!(SYS_gettimeofday, Any, "Date.now when the vDSO falls back to the kernel"),
        entry!(SYS_getpid, Any, "the process's own id"),
        entry!(SYS_gettid, Any, "the thread's own id"),
        entry!(SYS_getrandom, Any, "hash seeds, V8's entropy source, Math.random seeds"),
        entry!(SYS_brk, Any, "the allocator's heap"),
        entry!(SYS_mmap, PrivateAnonymousMap, "the allocator, thread stacks, V8's heap and code space"),
        entry!(SYS_munmap, Any, "freeing mappings"),
        entry!(SYS_mremap, Any, "the allocator grows large blocks in place"),
        entry!(SYS_mprotect, Any, "guard pages, V8's JIT flipping code pages (mappings are anonymous)"),
        entry!(SYS_madvise, Any, "the allocator and V8 give memory back"),
        entry!(SYS_membarrier, Any, "V8's code patching"),
        entry!(
            SYS_clone,
            ThreadClone,
            "new threads: the engine pool, the async runtime's blocking pool, V8's platform"
        ),
        entry!(SYS_clone3, Any, "answered ENOSYS by the earlier filter, so clone's flags can be read"),
        entry!(SYS_set_robust_list, Any, "a new thread registers its robust futexes"),
        entry!(SYS_rseq, Any, "a new thread registers restartable sequences"),
        entry!(
            SYS_prctl,
            PrctlOptions(&[libc::PR_SET_NAME as u64, libc::PR_GET_NAME as u64, PR_SET_VMA]),
            "thread names and mapping names"
        ),
        entry!(SYS_sigaltstack, Any, "a new thread's stack-overflow handler stack"),
        entry!(SYS_rt_sigaction, Any, "signal handlers (stack overflow, V8)"),
        entry!(SYS_rt_sigprocmask, Any, "signal masks of new threads"),
        entry!(SYS_rt_sigreturn, Any, "return from a signal handler"),
        entry!(SYS_restart_syscall, Any, "an interrupted sleep restarts"),
        entry!(SYS_tgkill, OwnProcess, "abort() and V8 signal a thread of this process only"),
        entry!(SYS_kill, OwnProcess, "signals to this process only"),
        entry!(SYS_exit, Any, "a thread ends"),
        entry!(SYS_exit_group, Any, "the process ends"),
        // Answered EACCES by the earlier filter: never reach a file.
        entry!(SYS_open, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_openat, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_newfstatat, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_statx, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_stat, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_lstat, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_access, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_faccessat, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_faccessat2, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_readlink, Any, "answered EACCES: lazy probes of files fail softly"),
        entry!(SYS_readlinkat, Any, "answered EACCES: lazy probes of files fail softly"),
    ]
}

/// Calls answered `EACCES` whatever else allows them: the file look-ups.
pub(crate) const FILE_LOOKUPS: [i64; 11] = [
    libc::SYS_open,
    libc::SYS_openat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_readlink,
    libc::SYS_readlinkat,
];

/// seccompiler's error, whichever of its types: the source of [`ConfineError::Seccomp`].
type Failure = Box<dyn std::error::Error + Send + Sync>;

fn arch() -> Result<TargetArch, Failure> {
    Ok(std::env::consts::ARCH.try_into()?)
}

fn condition(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, Failure> {
    Ok(SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value)?)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, Failure> {
    Ok(SeccompRule::new(conditions)?)
}

/// The rules of one entry: any of them matching allows the call.
fn rules(entry: &Entry, pid: u64) -> Result<Vec<SeccompRule>, Failure> {
    use SeccompCmpOp::{Eq, MaskedEq};
    Ok(match entry.rule {
        Rule::Any => Vec::new(),
        Rule::ThreadClone => {
            let thread = (libc::CLONE_VM
                | libc::CLONE_FS
                | libc::CLONE_FILES
                | libc::CLONE_SIGHAND
                | libc::CLONE_THREAD
                | libc::CLONE_SYSVSEM) as u64;
            let never = (libc::CLONE_VFORK
                | libc::CLONE_PARENT
                | libc::CLONE_PTRACE
                | libc::CLONE_UNTRACED
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWCGROUP
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUSER
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWNET
                | libc::CLONE_PIDFD) as u64;
            vec![rule(vec![condition(0, MaskedEq(thread | never), thread)?])?]
        }
        Rule::PrivateAnonymousMap => {
            let mask = (libc::MAP_SHARED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
            let private_anonymous = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
            vec![rule(vec![condition(3, MaskedEq(mask), private_anonymous)?])?]
        }
        Rule::OwnProcess => vec![rule(vec![condition(0, Eq, pid)?])?],
        Rule::PrctlOptions(options) => {
            options.iter().map(|&option| rule(vec![condition(0, Eq, option)?])).collect::<Result<_, _>>()?
        }
    })
}

fn program(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    matched: SeccompAction,
) -> Result<BpfProgram, Failure> {
    Ok(SeccompFilter::new(rules, mismatch, matched, arch()?).and_then(BpfProgram::try_from)?)
}

/// The three filters, in the order they are applied.
pub(crate) fn filters() -> Result<[BpfProgram; 3], Failure> {
    // SAFETY: getpid has no arguments and cannot fail.
    let pid = unsafe { libc::getpid() } as u64;
    let mut allowed: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for entry in allowlist() {
        allowed.insert(entry.number, rules(&entry, pid)?);
    }
    let files = FILE_LOOKUPS.iter().map(|&number| (number, Vec::new())).collect();
    let clone3 = [(libc::SYS_clone3, Vec::new())].into_iter().collect();
    Ok([
        program(files, SeccompAction::Allow, SeccompAction::Errno(libc::EACCES as u32))?,
        program(clone3, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32))?,
        program(allowed, SeccompAction::KillProcess, SeccompAction::Allow)?,
    ])
}

/// The filters on every thread of the process, at once.
pub(super) fn apply() -> Result<(), ConfineError> {
    for filter in filters().map_err(ConfineError::Seccomp)? {
        seccompiler::apply_filter_all_threads(&filter).map_err(|e| ConfineError::Seccomp(e.into()))?;
    }
    Ok(())
}
