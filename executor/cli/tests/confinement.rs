//! Confinement of process isolation's workers (docs/security.md): what the host sees of
//! every confined worker from /proc, and, with the `confinement-probe` feature, each
//! forbidden system call refused (an errno, or death by SIGSYS with the pinned text) on
//! the engine's thread and on a new thread, where the same probe unconfined differs.
#![cfg(target_os = "linux")]

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use codemode_executor::{
    Confinement, EngineKind, Executor, ExecutorConfig, ProcessExecutor, Request, WorkerCommand,
};
use codemode_protocol::{ProviderDescriptor, ToolCall};
use support::json;

/// The tests here run one at a time, so the worker processes one test sees are its own.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Process isolation on `engine` at `confinement`; with `namespaces` false the worker skips
/// the namespace step (through `env`, as a host would where namespaces are refused).
fn executor_on(engine: EngineKind, confinement: Confinement, namespaces: bool) -> ProcessExecutor {
    let codemode = env!("CARGO_BIN_EXE_codemode").to_owned();
    let mut args = vec!["stdio".to_owned(), "--engine".to_owned(), engine.name().to_owned()];
    let program: std::path::PathBuf = if namespaces {
        codemode.into()
    } else {
        args.insert(0, codemode);
        args.insert(0, format!("{}=off", codemode_executor::confine::NAMESPACES_VAR));
        "/usr/bin/env".into()
    };
    let config = ExecutorConfig::default().workers(1).confinement(confinement).engine(engine);
    ProcessExecutor::new(config, WorkerCommand::new(program, args))
}

/// [`executor_on`] QuickJS.
fn executor(confinement: Confinement, namespaces: bool) -> ProcessExecutor {
    executor_on(EngineKind::QuickJs, confinement, namespaces)
}

/// The worker processes this test process has started, by pid.
fn worker_pids() -> BTreeSet<u32> {
    let mut pids = BTreeSet::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let children = std::fs::read_to_string(task.unwrap().path().join("children")).unwrap_or_default();
        pids.extend(children.split_whitespace().filter_map(|pid| pid.parse::<u32>().ok()));
    }
    pids.retain(|pid| {
        let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        command.split(|&b| b == 0).nth(1) == Some(&b"stdio"[..])
    });
    pids
}

/// A field of a status file, as written.
fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status.lines().find_map(|line| line.strip_prefix(name)).map(str::trim).unwrap_or("<absent>")
}

/// Everything the host checks of a confined worker from outside; `namespaces` says
/// whether it should have its own network namespace.
fn assert_locked(pid: u32, namespaces: bool) {
    let tasks: Vec<_> =
        std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().map(|t| t.unwrap().path()).collect();
    assert!(!tasks.is_empty());
    for task in &tasks {
        // A thread that ended between the listing and the read has nothing left to check.
        let Ok(status) = std::fs::read_to_string(task.join("status")) else { continue };
        let thread = task.display();
        assert_eq!(field(&status, "NoNewPrivs:"), "1", "{thread}");
        assert_eq!(field(&status, "Seccomp:"), "2", "{thread}");
        for set in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
            assert_eq!(field(&status, set), "0000000000000000", "{thread} {set}");
        }
    }
    // Pipes and anonymous inodes (epoll, eventfd); the only sockets are the async
    // runtime's own unnamed socketpair (its signal wake-up), made after the lock began.
    let unix = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap();
    let unnamed: BTreeSet<String> = unix
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() == 7).then(|| fields[6].to_owned())
        })
        .collect();
    let mut sockets = BTreeSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        // The runtime opens and closes descriptors as it runs: one closed between the
        // listing and the read is gone, and only what stays open is checked.
        let Ok(target) = std::fs::read_link(fd.unwrap().path()) else { continue };
        let target = target.to_string_lossy().into_owned();
        if let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
            assert!(unnamed.contains(inode), "worker {pid} holds {target}, not an unnamed Unix socket");
            sockets.insert(inode.to_owned());
            continue;
        }
        assert!(
            target.starts_with("pipe:") || target.starts_with("anon_inode:"),
            "worker {pid} holds {target}"
        );
    }
    assert!(sockets.len() <= 2, "worker {pid} holds sockets {sockets:?}");
    if namespaces {
        // Its network namespace is its own: every Unix socket in it is one the worker holds.
        let all: BTreeSet<String> =
            unix.lines().skip(1).filter_map(|l| l.split_whitespace().nth(6).map(str::to_owned)).collect();
        assert_eq!(all, sockets, "worker {pid}");
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let names: BTreeSet<String> = environ
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| String::from_utf8_lossy(entry).split('=').next().unwrap().to_owned())
        .collect();
    let mut allowed: BTreeSet<String> = [
        "CODEMODE_CONFINEMENT",
        "CODEMODE_DATA_LIMIT_BYTES",
        "CODEMODE_ANSWER_SPIN_US",
        "CODEMODE_ENGINE",
        "TZ",
    ]
    .map(String::from)
    .into();
    if !namespaces {
        allowed.insert(codemode_executor::confine::NAMESPACES_VAR.to_owned());
    }
    assert!(names.is_subset(&allowed), "worker {pid} environment: {names:?}");
    let own_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let net = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    if namespaces {
        assert_ne!(net, own_net);
        let devices = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
        let names: Vec<&str> = devices.lines().skip(2).map(|l| l.split(':').next().unwrap().trim()).collect();
        assert_eq!(names, ["lo"]);
    } else {
        assert_eq!(net, own_net);
    }
}

/// [`assert_locked`], except that a worker gone once a check failed is passed over
/// (`false`): the pool kills the worker that served a run (the first run's is new to any
/// `before`), and one being torn down closes what it holds while it is read. A worker
/// still there two seconds after a failed check fails the test.
fn assert_locked_unless_gone(pid: u32, namespaces: bool) -> bool {
    let Err(failure) = std::panic::catch_unwind(|| assert_locked(pid, namespaces)) else { return true };
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if !worker_pids().contains(&pid) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::panic::resume_unwind(failure)
}

/// Wait until a worker is ready (the pool keeps one ahead of demand) and, if `locked`,
/// done starting: its main thread under its filter (one still starting is not yet
/// offered to a run; the host checks it after its hello). A worker that never locks
/// fails the checks after the deadline. Workers in `before` are left out: one that served a
/// run, or belonged to an executor since dropped, is being killed and closes what it holds
/// while it is read.
async fn ready_workers(locked: bool, before: &BTreeSet<u32>) -> BTreeSet<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids: BTreeSet<u32> = worker_pids().difference(before).copied().collect();
        let started = |pid: &u32| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            !locked || field(&status, "Seccomp:") == "2"
        };
        if (!pids.is_empty() && pids.iter().all(started)) || Instant::now() > deadline {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_confined_worker_is_locked_as_the_host_sees_it() {
    let _one = ONE_AT_A_TIME.lock().await;
    for (engine, namespaces) in EngineKind::BUILT_IN.iter().flat_map(|&e| [(e, true), (e, false)]) {
        let executor = executor_on(engine, Confinement::Required, namespaces);
        let mut checked = 0;
        for n in 0..6 {
            if checked >= 3 {
                break;
            }
            let before = worker_pids();
            let outcome = executor
                .execute(
                    Request::new(format!("async () => [await store.get({n}), new Date(0).getTime()]"))
                        .provider(ProviderDescriptor::new("store", ["get"]))
                        .dispatch(
                            |call: ToolCall| async move { format!(r#"{{"result":{}}}"#, call.args_json) },
                        ),
                )
                .await;
            assert_eq!(json(&outcome), format!(r#"{{"result":[[{n}],0],"logs":[]}}"#));
            for pid in ready_workers(true, &before).await {
                checked += usize::from(assert_locked_unless_gone(pid, namespaces));
            }
        }
        assert!(checked >= 3, "checked {checked} workers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gets_only_the_hosts_settings_as_its_environment_and_a_bounded_stderr() {
    let _one = ONE_AT_A_TIME.lock().await;
    // Unconfined too: the environment is the host's decision, not the worker's.
    let before = worker_pids();
    let executor = executor(Confinement::Off, true);
    let outcome = executor.execute(Request::new("async () => 1")).await;
    assert_eq!(json(&outcome), r#"{"result":1,"logs":[]}"#);
    let pids = ready_workers(false, &before).await;
    assert_eq!(pids.len(), 1);
    for pid in pids {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let entries: Vec<String> = environ
            .split(|&b| b == 0)
            .filter(|entry| !entry.is_empty())
            .map(|entry| String::from_utf8_lossy(entry).into_owned())
            .filter(|entry| !entry.starts_with("TZ="))
            .collect();
        // Only the host's answer spin (the default, in microseconds) and its engine.
        let spin = format!("CODEMODE_ANSWER_SPIN_US={}", codemode_executor::DEFAULT_ANSWER_SPIN.as_micros());
        assert_eq!(entries, [spin, "CODEMODE_ENGINE=quickjs".to_owned()]);
        let stderr = std::fs::read_link(format!("/proc/{pid}/fd/2")).unwrap();
        assert!(stderr.to_string_lossy().starts_with("pipe:"), "{stderr:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_run_prints_the_dates_an_in_process_one_does() {
    let _one = ONE_AT_A_TIME.lock().await;
    let code = "async () => [new Date(0).toString(), new Date(1.7e12).toLocaleString(), new Date(0).getTimezoneOffset()]";
    for &engine in EngineKind::BUILT_IN {
        let confined = executor_on(engine, Confinement::Required, true).execute(Request::new(code)).await;
        let in_process =
            Executor::new(ExecutorConfig::default().engine(engine)).execute(Request::new(code)).await;
        assert_eq!(json(&confined), json(&in_process), "{}", engine.name());
    }
}

#[cfg(feature = "confinement-probe")]
mod probes {
    use std::collections::BTreeMap;

    use super::*;

    /// One probe: a program that makes a forbidden system call and returns its result.
    struct Probe {
        name: &'static str,
        /// The body of an async arrow function; `sys` is the probe global to use.
        body: String,
    }

    fn probe(name: &'static str, body: impl Into<String>) -> Probe {
        Probe { name, body: body.into() }
    }

    /// A `sockaddr_in` for 127.0.0.1:`port`, as a JavaScript Uint8Array.
    fn sockaddr(port: u16) -> String {
        let [hi, lo] = port.to_be_bytes();
        format!("new Uint8Array([2, 0, {hi}, {lo}, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0])")
    }

    /// The probes, ≥40: files, sockets, io_uring, processes, privileges, namespaces,
    /// kernel interfaces, other entry points.
    fn probes(tcp_port: u16, udp_port: u16) -> Vec<Probe> {
        use libc::*;
        let host = std::process::id();
        let tcp = sockaddr(tcp_port);
        let udp = sockaddr(udp_port);
        // A result that is a descriptor, an address or an id reads as "ok" so the
        // unconfined run's output is stable; an errno stays itself.
        let ok = "(r) => (r >= 0 ? 'ok' : r)";
        let all = vec![
            probe("open a file", format!("return ({ok})(sys({SYS_open}, '/etc/passwd', {O_RDONLY}))")),
            probe(
                "openat a file",
                format!("return ({ok})(sys({SYS_openat}, {AT_FDCWD}, '/etc/passwd', {O_RDONLY}))"),
            ),
            probe(
                "create a file",
                format!(
                    "return ({ok})(sys({SYS_openat}, {AT_FDCWD}, '/tmp/codemode-probe-created', {}, 384))",
                    O_CREAT | O_WRONLY
                ),
            ),
            probe(
                "stat a file",
                format!(
                    "return ({ok})(sys({SYS_newfstatat}, {AT_FDCWD}, '/etc/passwd', ' '.repeat(256), 0))"
                ),
            ),
            probe(
                "statx a file",
                format!(
                    "return ({ok})(sys({SYS_statx}, {AT_FDCWD}, '/etc/passwd', 0, 4095, ' '.repeat(512)))"
                ),
            ),
            probe(
                "readlink",
                format!(
                    "return ({ok})(sys({SYS_readlinkat}, {AT_FDCWD}, '/proc/self/exe', ' '.repeat(256), 255))"
                ),
            ),
            probe("access", format!("return ({ok})(sys({SYS_faccessat}, {AT_FDCWD}, '/etc/passwd', 4))")),
            probe(
                "mkdir",
                format!("return ({ok})(sys({SYS_mkdirat}, {AT_FDCWD}, '/tmp/codemode-probe-dir', 448))"),
            ),
            probe("truncate", format!("return ({ok})(sys({SYS_truncate}, '/tmp/codemode-probe-absent', 0))")),
            probe(
                "unlink",
                format!("return ({ok})(sys({SYS_unlinkat}, {AT_FDCWD}, '/tmp/codemode-probe-absent', 0))"),
            ),
            probe("chmod", format!("return ({ok})(sys({SYS_fchmodat}, {AT_FDCWD}, '/tmp', 511))")),
            probe(
                "getdents of stdin",
                format!("return ({ok})(sys({SYS_getdents64}, 0, ' '.repeat(512), 512))"),
            ),
            probe("socket AF_INET", format!("return ({ok})(sys({SYS_socket}, {AF_INET}, {SOCK_STREAM}, 0))")),
            probe(
                "socket AF_INET6",
                format!("return ({ok})(sys({SYS_socket}, {AF_INET6}, {SOCK_STREAM}, 0))"),
            ),
            probe("socket AF_UNIX", format!("return ({ok})(sys({SYS_socket}, {AF_UNIX}, {SOCK_STREAM}, 0))")),
            probe(
                "socket AF_NETLINK",
                format!("return ({ok})(sys({SYS_socket}, {AF_NETLINK}, {SOCK_RAW}, 0))"),
            ),
            probe(
                "socket AF_PACKET",
                format!("return ({ok})(sys({SYS_socket}, {AF_PACKET}, {SOCK_RAW}, 0))"),
            ),
            probe(
                "socket AF_VSOCK",
                format!("return ({ok})(sys({SYS_socket}, {AF_VSOCK}, {SOCK_STREAM}, 0))"),
            ),
            probe(
                "socket AF_ALG",
                format!("return ({ok})(sys({SYS_socket}, {AF_ALG}, {SOCK_SEQPACKET}, 0))"),
            ),
            probe(
                "socketpair",
                format!("return ({ok})(sys({SYS_socketpair}, {AF_UNIX}, {SOCK_STREAM}, 0, ' '.repeat(8)))"),
            ),
            probe(
                "connect to the test's listener",
                format!(
                    "const s = sys({SYS_socket}, {AF_INET}, {SOCK_STREAM}, 0); return ({ok})(sys({SYS_connect}, s, {tcp}, 16))"
                ),
            ),
            probe("connect on stdout", format!("return sys({SYS_connect}, 1, {tcp}, 16)")),
            probe(
                "sendto the test's listener",
                format!(
                    "const s = sys({SYS_socket}, {AF_INET}, {SOCK_DGRAM}, 0); return ({ok})(sys({SYS_sendto}, s, 'probe', 5, 0, {udp}, 16))"
                ),
            ),
            probe("sendto on stdout", format!("return sys({SYS_sendto}, 1, 'x', 1, 0, {udp}, 16)")),
            probe(
                "io_uring_setup",
                format!("return ({ok})(sys({SYS_io_uring_setup}, 1, new Uint8Array(120)))"),
            ),
            probe(
                "fork",
                format!("const r = sys({SYS_fork}); if (r === 0) sys({SYS_exit_group}, 0); return ({ok})(r)"),
            ),
            probe(
                "vfork-style clone",
                format!("return sys({SYS_clone}, {}, 0)", CLONE_VFORK | CLONE_SIGHAND),
            ),
            probe(
                "clone into a new user namespace",
                format!("return sys({SYS_clone}, {}, 0)", CLONE_NEWUSER | CLONE_THREAD),
            ),
            probe("clone3", format!("return sys({SYS_clone3}, 0, 0)")),
            probe("execve", format!("return sys({SYS_execve}, '/bin/true', 0, 0)")),
            probe("ptrace the host", format!("return sys({SYS_ptrace}, {PTRACE_PEEKDATA}, {host}, 0, 0)")),
            probe(
                "process_vm_readv of the host",
                format!("return sys({SYS_process_vm_readv}, {host}, 0, 0, 0, 0, 0)"),
            ),
            probe("kill the host", format!("return sys({SYS_kill}, {host}, 0)")),
            probe("tgkill the host", format!("return sys({SYS_tgkill}, {host}, {host}, 0)")),
            probe("pidfd_open the host", format!("return ({ok})(sys({SYS_pidfd_open}, {host}, 0))")),
            probe("setuid", format!("return sys({SYS_setuid}, 0)")),
            probe("setresgid", format!("return sys({SYS_setresgid}, 0, 0, 0)")),
            probe("capset", format!("return sys({SYS_capset}, 0, 0)")),
            probe("unshare", format!("return sys({SYS_unshare}, {CLONE_NEWNET})")),
            probe("setns", format!("return sys({SYS_setns}, 0, 0)")),
            probe("chroot", format!("return sys({SYS_chroot}, '/')")),
            probe("mount", format!("return sys({SYS_mount}, 0, 0, 0, 0, 0)")),
            probe("seccomp", format!("return sys({SYS_seccomp}, 99, 0, 0)")),
            probe("prctl dumpable", format!("return sys({SYS_prctl}, {PR_SET_DUMPABLE}, 1)")),
            probe("bpf", format!("return sys({SYS_bpf}, 9999, 0, 0)")),
            probe("perf_event_open", format!("return sys({SYS_perf_event_open}, 0, 0, -1, -1, 0)")),
            probe("userfaultfd", format!("return ({ok})(sys({SYS_userfaultfd}, 0))")),
            probe("keyctl", format!("return ({ok})(sys({SYS_keyctl}, 0, -3, 0))")),
            probe("memfd_create", format!("return ({ok})(sys({SYS_memfd_create}, 'probe', 0))")),
            probe(
                "mmap shared",
                format!(
                    "return ({ok})(sys({SYS_mmap}, 0, 4096, {PROT_READ}, {}, -1, 0))",
                    MAP_SHARED | MAP_ANONYMOUS
                ),
            ),
            probe(
                "mmap of a descriptor",
                format!("return ({ok})(sys({SYS_mmap}, 0, 4096, {PROT_READ}, {MAP_PRIVATE}, 0, 0))"),
            ),
            probe("getuid", format!("return ({ok})(sys({SYS_getuid}))")),
            probe("the i386 entry point", "return (r => (r > 0 ? 'ok' : r))(sys(2 ** 32 + 20))".to_owned()),
            probe("an x32 number", format!("return ({ok})(sys({}))", 0x4000_0000 + SYS_getpid)),
            probe("an unassigned number", "return sys(999)".to_owned()),
        ];
        all
    }

    /// What a confined worker's probe ends with: the file look-ups are answered `EACCES`
    /// (lazy library probes fail softly), `clone3` `ENOSYS` (so `clone`'s flags can be
    /// read); every other probe kills the worker, which the host reports with the pinned text.
    fn refusal(probe: &str) -> String {
        let errno = |e: i32| format!(r#"{{"result":{},"logs":[]}}"#, -e);
        match probe {
            "open a file" | "openat a file" | "create a file" | "stat a file" | "statx a file"
            | "readlink" | "access" => errno(libc::EACCES),
            "clone3" => errno(libc::ENOSYS),
            _ => format!(
                r#"{{"error":"{}","kind":"internal","logs":[]}}"#,
                codemode_protocol::texts::WORKER_CONFINEMENT_KILLED
            ),
        }
    }

    async fn run(executor: &dyn codemode_executor::Execute, global: &str, body: &str) -> String {
        let code = format!("async () => {{ const sys = {global}; {body} }}");
        json(&executor.execute(Request::new(code).timeout(Duration::from_secs(20))).await)
    }

    /// Every probe on every engine built in, on the engine's thread and on a new one:
    /// refused confined, and different unconfined. With `namespaces` false, seccomp and
    /// Landlock alone.
    async fn every_probe_is_refused(namespaces: bool) {
        for &engine in EngineKind::BUILT_IN {
            every_probe_is_refused_on(engine, namespaces).await;
        }
    }

    async fn every_probe_is_refused_on(engine: EngineKind, namespaces: bool) {
        let on = engine.name();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let probes = probes(tcp.local_addr().unwrap().port(), udp.local_addr().unwrap().port());
        assert!(probes.len() >= 40, "{} probes", probes.len());
        let confined = executor_on(engine, Confinement::Required, namespaces);
        let mut results = BTreeMap::new();
        for global in ["__codemode_syscall", "__codemode_syscall_on_new_thread"] {
            for probe in &probes {
                let locked = run(&confined, global, &probe.body).await;
                assert_eq!(locked, refusal(probe.name), "{on}: {} ({global})", probe.name);
                results.insert((probe.name, global), locked.clone());
            }
        }
        // Nothing reached the test's listeners from a confined worker.
        assert!(tcp.accept().is_err());
        assert!(udp.recv(&mut [0u8; 16]).is_err());
        if !namespaces {
            return;
        }
        for probe in &probes {
            let global = "__codemode_syscall";
            // A worker of its own: some probes change the process they run in.
            let open = run(&executor_on(engine, Confinement::Off, true), global, &probe.body).await;
            let locked = &results[&(probe.name, global)];
            eprintln!("{on}: {}: confined {locked}, unconfined {open}", probe.name);
            assert_ne!(&open, locked, "{on}: {}: the same result unconfined", probe.name);
        }
        // Unconfined, the listeners were reached: the probes do what they say.
        let deadline = Instant::now() + Duration::from_secs(5);
        while tcp.accept().is_err() {
            assert!(Instant::now() < deadline, "no connection reached the listener unconfined");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(udp.recv(&mut [0u8; 16]).unwrap(), 5);
        let _ = std::fs::remove_file("/tmp/codemode-probe-created");
        let _ = std::fs::remove_dir("/tmp/codemode-probe-dir");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_probe_is_refused_confined_and_not_unconfined() {
        let _one = ONE_AT_A_TIME.lock().await;
        every_probe_is_refused(true).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_namespaces_seccomp_and_landlock_still_refuse_every_probe() {
        let _one = ONE_AT_A_TIME.lock().await;
        every_probe_is_refused(false).await;
    }

    /// The probe exists and works in a worker that is not confined, and a run that is
    /// killed by its filter is a pinned outcome, not a lost host.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_worker_is_the_pinned_text_and_the_next_run_goes_on() {
        let _one = ONE_AT_A_TIME.lock().await;
        let executor = executor(Confinement::Required, true);
        let killed = run(&executor, "__codemode_syscall", &format!("return sys({})", libc::SYS_getuid)).await;
        assert_eq!(
            killed,
            format!(
                r#"{{"error":"{}","kind":"internal","logs":[]}}"#,
                codemode_protocol::texts::WORKER_CONFINEMENT_KILLED
            )
        );
        let pid =
            run(&executor, "__codemode_syscall", &format!("return sys({}) > 0", libc::SYS_getpid)).await;
        assert_eq!(pid, r#"{"result":true,"logs":[]}"#);
    }
}

/// The probe is a test-only feature: a build without it has no such global, confined or not.
#[cfg(not(feature = "confinement-probe"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_binary_has_no_probe() {
    let _one = ONE_AT_A_TIME.lock().await;
    let code = "async () => [typeof __codemode_syscall, typeof __codemode_syscall_on_new_thread]";
    let expected = r#"{"result":["undefined","undefined"],"logs":[]}"#;
    for confinement in [Confinement::Required, Confinement::Off] {
        assert_eq!(json(&executor(confinement, true).execute(Request::new(code)).await), expected);
    }
    assert_eq!(json(&Executor::default().execute(Request::new(code)).await), expected);
}

/// docs/security.md lists every entry of the allowlist with its reason.
#[test]
fn the_security_guide_lists_the_allowlist() {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md")).unwrap();
    for (call, why) in codemode_executor::confine::seccomp_allowlist() {
        let row = format!("| `{call}` | {why} |");
        assert!(guide.contains(&row), "docs/security.md lacks the row {row}");
    }
}

/// A host may give a worker one end of a socket pair as its stdin and stdout (as Node's
/// `'pipe'` stdio does): a confined worker serves it, writes with the calls its allowlist
/// has, shuts its end down for writing when the host is done, and exits cleanly.
#[test]
fn a_confined_worker_on_a_socket_pair_serves_and_ends_cleanly() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let _one = ONE_AT_A_TIME.blocking_lock();
    let (mut host, worker) = UnixStream::pair().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_codemode"))
        .arg("stdio")
        .env(codemode_executor::confine::CONFINEMENT_VAR, "required")
        .stdin(OwnedFd::from(worker.try_clone().unwrap()))
        .stdout(OwnedFd::from(worker))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    host.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut lines = BufReader::new(host.try_clone().unwrap()).lines();
    writeln!(host, r#"{{"type":"hello","protocol":"codemode","version":1}}"#).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), r#"{"type":"hello","protocol":"codemode","version":1}"#);
    writeln!(host, r#"{{"type":"execute","execution":1,"request":{{"code":"async () => 6 * 7"}}}}"#).unwrap();
    assert_eq!(
        lines.next().unwrap().unwrap(),
        r#"{"type":"outcome","execution":1,"outcome":{"result":42,"logs":[]}}"#
    );
    host.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(lines.next().is_none(), "the worker shuts its end down after the host's");
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status}: {stderr}");
}
