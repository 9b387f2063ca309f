//! Stuck engines in-process: an engine still running 50 ms after its stop (deadline or
//! cancel) is counted until it returns, and a daemon past `max_stuck_engines` of them is
//! not ready, with the gauge `codemode_stuck_engines` saying how many.
//!
//! QuickJS stops inside every loop of its builtins, so the native call that ignores the
//! stop is the test-only confinement probe's (`--features confinement-probe`): `poll`
//! with no descriptors sleeps its whole timeout on the engine's thread.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use codemode_executor::daemon::{Address, Daemon, DaemonConfig, DaemonLimits};
use codemode_executor::{Execute, Executor, ExecutorConfig, RemoteExecutor, Request, STUCK_AFTER};

/// How long the probe holds the engine's thread: far past the deadline and the grace.
const SLEEP_MS: u64 = 2000;

/// A program that sits in one native call for [`SLEEP_MS`] (`poll(NULL, 0, ms)`, system
/// call 7 on x86_64), deaf to its stop.
fn sleeper() -> String {
    format!("async () => {{ __codemode_syscall(7, 0, 0, {SLEEP_MS}); return 'woke' }}")
}

const TIMED_OUT: &str = r#"{"error":"Execution timed out after 100 ms.","kind":"timeout","logs":[]}"#;

/// Wait until `check` holds, at most `within`; whether it did.
async fn until(within: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !check() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_deaf_to_its_deadline_is_stuck_until_it_returns() {
    let executor = Executor::new(ExecutorConfig::default().workers(1));
    let started = Instant::now();
    let outcome = executor.execute(Request::new(sleeper()).timeout(Duration::from_millis(100))).await;
    // The outcome is the watchdog's, on time, while the thread still sleeps.
    assert_eq!(outcome.to_json_string(), TIMED_OUT);
    let settled = started.elapsed();
    assert!(settled < Duration::from_millis(100 + 400), "{settled:?}");
    if started.elapsed() < Duration::from_millis(100) + STUCK_AFTER - Duration::from_millis(10) {
        assert_eq!(executor.stuck_engines(), 0, "counted before {STUCK_AFTER:?} past the stop");
    }
    assert!(until(Duration::from_secs(1), || executor.stuck_engines() == 1).await, "never counted stuck");
    let counted = started.elapsed();
    assert!(counted >= Duration::from_millis(100) + STUCK_AFTER, "counted at {counted:?}");
    assert_eq!(Execute::stuck_engines(&executor), Some(1));
    // Still running a second after its deadline: abandoned too, as before.
    assert!(until(Duration::from_secs(2), || executor.abandoned_engines() == 1).await);
    assert_eq!(executor.stuck_engines(), 1);
    // The native call returns, the stop is seen, the engine goes: the count goes down.
    assert!(until(Duration::from_secs(3), || executor.stuck_engines() == 0).await, "never returned");
    let returned = started.elapsed();
    assert!(
        returned >= Duration::from_millis(SLEEP_MS),
        "uncounted at {returned:?}, before the call returned"
    );
    assert_eq!(executor.abandoned_engines(), 1);
    // The executor is whole: the next run is served at once.
    let next = executor.execute(Request::new("async () => 1")).await;
    assert_eq!(next.to_json_string(), r#"{"result":1,"logs":[]}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_deaf_to_its_cancel_is_stuck_until_it_returns() {
    let executor = Executor::new(ExecutorConfig::default().workers(1));
    let run = executor.execute(Request::new(sleeper()).timeout(Duration::from_secs(30)));
    // Dropped after 100 ms: the host cancels, and the engine does not hear it.
    assert!(tokio::time::timeout(Duration::from_millis(100), run).await.is_err());
    let cancelled = Instant::now();
    assert!(until(Duration::from_secs(1), || executor.stuck_engines() == 1).await, "never counted stuck");
    assert!(cancelled.elapsed() >= STUCK_AFTER, "counted {:?} after the cancel", cancelled.elapsed());
    assert!(until(Duration::from_secs(3), || executor.stuck_engines() == 0).await, "never returned");
    // Only a deadline's stop makes an engine abandoned.
    assert_eq!(executor.abandoned_engines(), 0);
}

/// An engine that returns within its grace is never counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_stops_is_never_counted() {
    let executor = Executor::new(ExecutorConfig::default().workers(1));
    let outcome = executor
        .execute(Request::new("async () => { for (;;) {} }").timeout(Duration::from_millis(100)))
        .await;
    assert_eq!(outcome.to_json_string(), TIMED_OUT);
    tokio::time::sleep(STUCK_AFTER * 4).await;
    assert_eq!(executor.stuck_engines(), 0);
}

/// The gauges set through the `metrics` facade, by name (labels ignored).
#[derive(Default)]
struct Gauges(Mutex<HashMap<String, Arc<Gauge>>>);

#[derive(Default)]
struct Gauge(AtomicU64);

impl metrics::GaugeFn for Gauge {
    fn increment(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Acquire)) + value);
    }
    fn decrement(&self, value: f64) {
        self.set(f64::from_bits(self.0.load(Ordering::Acquire)) - value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Release);
    }
}

impl Gauges {
    fn get(&self, name: &str) -> Option<f64> {
        let gauges = self.0.lock().unwrap();
        gauges.get(name).map(|gauge| f64::from_bits(gauge.0.load(Ordering::Acquire)))
    }
}

struct Recording(&'static Gauges);

impl metrics::Recorder for Recording {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        let mut gauges = self.0.0.lock().unwrap();
        let gauge = gauges.entry(key.name().to_owned()).or_default().clone();
        metrics::Gauge::from_arc(gauge)
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// This process's recorder, installed once.
fn gauges() -> &'static Gauges {
    static GAUGES: OnceLock<&'static Gauges> = OnceLock::new();
    GAUGES.get_or_init(|| {
        let gauges: &'static Gauges = Box::leak(Box::default());
        metrics::set_global_recorder(Recording(gauges)).unwrap();
        gauges
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_past_its_stuck_engines_is_not_ready_until_they_return() {
    let gauges = gauges();
    let socket = std::env::temp_dir().join(format!("codemode-stuck-{}.sock", std::process::id()));
    let executor = Executor::new(ExecutorConfig::default().workers(2));
    let limits = DaemonLimits::default().max_stuck_engines(1);
    let daemon = Daemon::bind_with(DaemonConfig::new(Address::Unix(socket.clone())), limits).await.unwrap();
    let health = daemon.health();
    tokio::spawn(daemon.serve(executor.clone()));
    assert!(until(Duration::from_secs(5), || health.is_ready()).await, "never ready");
    assert_eq!((health.stuck_engines(), health.too_many_stuck()), (0, false));
    let remote = RemoteExecutor::connect(&format!("unix:{}", socket.display()), None).await.unwrap();
    let started = Instant::now();

    let request = || Request::new(sleeper()).timeout(Duration::from_millis(100));
    assert_eq!(remote.execute(request()).await.to_json_string(), TIMED_OUT);
    assert!(until(Duration::from_secs(1), || health.stuck_engines() == 1).await, "never counted stuck");
    // One stuck engine is not past a max of one: still ready.
    assert!(health.is_ready());
    assert_eq!(remote.execute(request()).await.to_json_string(), TIMED_OUT);
    assert!(until(Duration::from_secs(1), || health.stuck_engines() == 2).await, "never counted stuck");
    assert!(!health.is_ready(), "ready with 2 stuck engines, past a max of 1");
    assert!(health.too_many_stuck());
    assert!(!health.is_draining());
    // The daemon's heartbeat (each second) records the gauge.
    let gauge = || gauges.get(codemode_executor::metrics::STUCK_ENGINES);
    assert!(until(Duration::from_millis(1500), || gauge() == Some(2.0)).await, "gauge {:?}", gauge());
    // Both native calls return: the engines go, the daemon is ready again.
    assert!(until(Duration::from_secs(4), || health.stuck_engines() == 0).await, "never returned");
    assert!(started.elapsed() >= Duration::from_millis(SLEEP_MS), "{:?}", started.elapsed());
    assert!(health.is_ready());
    assert!(until(Duration::from_millis(1500), || gauge() == Some(0.0)).await, "gauge {:?}", gauge());
    let _ = std::fs::remove_file(&socket);
}
