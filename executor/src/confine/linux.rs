//! The Linux layers of a worker's init (rlimits, namespaces, capabilities, prctls,
//! Landlock) and the host's check of a worker through `/proc`.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use super::{CheckError, ConfineError, Confinement, Layers};

/// The Landlock ABI whose rights are all handled (this kernel's newest known to the crate
/// we ship; an older kernel gets what it has, reported as partial).
const LANDLOCK_ABI: ABI = ABI::V7;

/// Descriptors a worker may hold: stdio, its runtime's epoll and wakers, V8's platform.
const MAX_DESCRIPTORS: u64 = 64;

/// Timezone data a confined worker may read (it reads it once while warming up; the
/// rule keeps a late lookup working rather than failing).
const TIMEZONE_PATHS: [&str; 2] = ["/etc/localtime", "/usr/share/zoneinfo"];

pub(super) fn prepare(
    level: Confinement,
    data_limit_bytes: u64,
    namespaces: bool,
) -> Result<Layers, ConfineError> {
    // stacker (deep JSON in the protocol) reads the main thread's stack bounds from
    // /proc/self/maps the first time, and caches them per thread; Landlock closes /proc
    // below, after which it would find no bounds and give every parse on this thread a
    // fresh 2 MiB stack (an mmap, mprotect and munmap per message, +13 µs per tool call).
    // The worker's frames are parsed on its runtime's threads, whose bounds come from the
    // thread itself; this keeps any parse on the main thread as cheap.
    let _ = stacker::remaining_stack();
    close_inherited_descriptors()?;
    let limited = limits(data_limit_bytes);
    if level == Confinement::Required {
        limited?;
    }
    let mut layers = Layers::default();
    // User namespace first: the others need the capabilities it gives. Refused where
    // unprivileged ones are (Docker's default profile, Ubuntu's AppArmor rule): seccomp and
    // Landlock still hold, and the host sees which layers a worker has.
    if namespaces {
        // SAFETY: unshare takes flags only; the process is still single-threaded, as
        // CLONE_NEWUSER requires.
        let entered = unsafe {
            libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS)
        } == 0;
        layers.namespaces = entered;
    }
    layers.capabilities_dropped = drop_capabilities()?;
    // After the credential changes above, which would reset both.
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(prctl_failed("PR_SET_PDEATHSIG"));
    }
    // The host died before the death signal was set: nobody is left to serve.
    // SAFETY: getppid has no arguments and cannot fail.
    if unsafe { libc::getppid() } == 1 {
        std::process::exit(1);
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(prctl_failed("PR_SET_DUMPABLE"));
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(prctl_failed("PR_SET_NO_NEW_PRIVS"));
    }
    // A kernel without Landlock (older than 5.13, or the LSM not enabled) still gets the
    // seccomp allowlist, which is what `required` demands; the worker reports the layer.
    // A container's own seccomp profile may refuse Landlock's calls: reported, not fatal.
    layers.landlock = landlock().unwrap_or_else(|problem| {
        eprintln!("codemode stdio: {problem}");
        false
    });
    Ok(layers)
}

/// The failure of the `prctl` just made.
fn prctl_failed(option: &'static str) -> ConfineError {
    ConfineError::Prctl { option, source: std::io::Error::last_os_error() }
}

/// Every descriptor above stderr closed: nothing the host had open reaches the worker.
fn close_inherited_descriptors() -> Result<(), ConfineError> {
    // SAFETY: close_range takes integers; no Rust object owns a descriptor above 2 yet.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if closed != 0 {
        return Err(ConfineError::CloseDescriptors(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// No core files, no file writes, few descriptors, a data cap above the engines' budget.
fn limits(data_limit_bytes: u64) -> Result<(), ConfineError> {
    let set = |resource, value: u64, name: &'static str| {
        let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
        // SAFETY: a valid rlimit on the stack, read by the kernel only.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(ConfineError::Rlimit { resource: name, source: std::io::Error::last_os_error() });
        }
        Ok(())
    };
    set(libc::RLIMIT_CORE, 0, "RLIMIT_CORE")?;
    set(libc::RLIMIT_FSIZE, 0, "RLIMIT_FSIZE")?;
    set(libc::RLIMIT_NOFILE, MAX_DESCRIPTORS, "RLIMIT_NOFILE")?;
    set(libc::RLIMIT_DATA, data_limit_bytes, "RLIMIT_DATA")
}

/// Every capability set emptied: bounding (while CAP_SETPCAP is still held), ambient,
/// then effective, permitted and inheritable. `Ok(false)` when the bounding set could not
/// be emptied (no CAP_SETPCAP, no user namespace): harmless under no-new-privileges, which
/// keeps an execve from gaining anything, but reported.
fn drop_capabilities() -> Result<bool, ConfineError> {
    let mut bounding_emptied = true;
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only. EINVAL past the last capability.
        if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } < 0 {
            break;
        }
        // SAFETY: as above; EPERM without CAP_SETPCAP.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            bounding_emptied = false;
        }
    }
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header { version: VERSION_3, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capset reads one v3 header and two data words, both live on the stack.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(ConfineError::Capabilities(std::io::Error::last_os_error()));
    }
    Ok(bounding_emptied)
}

/// Landlock handling every filesystem and network right and both scopes, with read-only
/// timezone data the one exception. `Ok(true)` when fully enforced.
fn landlock() -> Result<bool, String> {
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let failed = |e: landlock::RulesetError| format!("Landlock failed: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .map_err(failed)?
        .handle_access(AccessNet::from_all(LANDLOCK_ABI))
        .map_err(failed)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(failed)?
        .create()
        .map_err(failed)?;
    for path in TIMEZONE_PATHS {
        let Ok(fd) = landlock::PathFd::new(path) else { continue };
        // A file takes only the rights a file has.
        let access =
            if std::path::Path::new(path).is_dir() { read } else { read & AccessFs::from_file(LANDLOCK_ABI) };
        ruleset = ruleset.add_rule(landlock::PathBeneath::new(fd, access)).map_err(failed)?;
    }
    let status = ruleset.restrict_self().map_err(failed)?;
    Ok(status.ruleset == RulesetStatus::FullyEnforced)
}

/// The host's check of a worker: every thread under no-new-privs and seccomp filter mode.
pub(super) fn check(pid: u32) -> Result<(), CheckError> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|source| CheckError::Threads { pid, source })?;
    let mut threads = 0;
    for task in tasks {
        let task = task.map_err(|source| CheckError::Threads { pid, source })?;
        let status = match std::fs::read_to_string(task.path().join("status")) {
            Ok(status) => status,
            // A thread that ended between the listing and the read has nothing to check.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
                continue;
            }
            Err(source) => return Err(CheckError::Status { pid, source }),
        };
        let field =
            |name: &str| status.lines().find_map(|line| line.strip_prefix(name)).map(str::trim).unwrap_or("");
        if field("NoNewPrivs:") != "1" {
            return Err(CheckError::NoNewPrivileges { pid });
        }
        if field("Seccomp:") != "2" {
            return Err(CheckError::NoSeccomp { pid });
        }
        threads += 1;
    }
    if threads == 0 {
        return Err(CheckError::NoThreads { pid });
    }
    Ok(())
}

/// Cap worker `pid`'s committed memory (`RLIMIT_DATA`, which counts private writable
/// mappings: V8's reserved but uncommitted heap and wasm guard regions are not in it) at
/// what it holds now plus `room`, under its hard limit. Set by the host before each run.
pub(super) fn cap_data(pid: u32, room: u64) -> std::io::Result<()> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let held_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmData:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no VmData in the worker's status"))?;
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reads the limit into `old`, a valid rlimit on the stack.
    if unsafe { libc::prlimit(pid, libc::RLIMIT_DATA, std::ptr::null(), &mut old) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let cap = libc::rlimit {
        rlim_cur: held_kib.saturating_mul(1024).saturating_add(room).min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: a valid rlimit on the stack, read by the kernel only; the old one is not asked for.
    if unsafe { libc::prlimit(pid, libc::RLIMIT_DATA, &cap, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
