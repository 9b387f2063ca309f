//! `codemode serve --admin HOST:PORT`: plain HTTP for probes and scrapes (`/livez`,
//! `/readyz`, `/metrics`), apart from the execution listener, and the Prometheus exporter
//! behind `/metrics`. It runs on the control thread's own runtime (serve.rs), so a starved
//! daemon runtime is seen as not live while a loaded one still answers.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use codemode_executor::daemon::DaemonHealth;
use codemode_executor::metrics as names;
use codemode_protocol::OutcomeKind;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The Content-Type of Prometheus's text exposition format.
pub(crate) const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bucket bounds of `codemode_execution_duration_seconds`: 1 ms to 5 min (the longest
/// timeout worth a bucket; slower runs fall in `+Inf`).
const EXECUTION_BUCKETS: [f64; 17] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// Bucket bounds of `codemode_call_duration_seconds`: 100 µs (a call answered in process)
/// to 30 s (a slow upstream).
const CALL_BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

/// How often histogram samples are folded into their buckets when nobody scrapes, so they
/// do not pile up.
const UPKEEP: Duration = Duration::from_secs(5);

/// Install the Prometheus recorder as the process's, describe every metric, and register
/// the series known up front at zero (each outcome, the engine served), so a scrape shows
/// every name from the start and `rate()` sees the first increment.
pub(crate) fn install_exporter(engine: &'static str) -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(names::EXECUTION_DURATION_SECONDS.to_owned()),
            &EXECUTION_BUCKETS,
        )
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(names::CALL_DURATION_SECONDS.to_owned()), &CALL_BUCKETS)
        })
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| format!("cannot install the metrics exporter: {e}"))?;
    metrics::describe_counter!(
        names::EXECUTIONS_TOTAL,
        "Executions that ended, by outcome: the outcome's kind, refused (never started) or shutdown (ended by the drain timeout)."
    );
    metrics::describe_histogram!(
        names::EXECUTION_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "From execute to outcome, by engine."
    );
    metrics::describe_histogram!(
        names::CALL_DURATION_SECONDS,
        metrics::Unit::Seconds,
        "From a call leaving the sandbox to its answer arriving."
    );
    metrics::describe_gauge!(names::EXECUTIONS_IN_FLIGHT, "Executions admitted and not yet ended.");
    metrics::describe_gauge!(names::ENGINES_LIVE, "Engines alive (running or retained), by engine.");
    metrics::describe_gauge!(names::CONNECTIONS_OPEN, "Connections open, authenticated or not.");
    metrics::describe_gauge!(names::DRAINING, "1 while the daemon drains, else 0.");
    metrics::describe_gauge!(names::BUILD_INFO, "Always 1, labelled with the version and the engine served.");
    metrics::describe_gauge!(
        names::STUCK_ENGINES,
        "Engines stopped (deadline, cancel, memory) and still running 50 ms later, each holding a thread until it returns; in-process only."
    );
    metrics::describe_counter!(
        names::CELLS_REAPED_TOTAL,
        "Runs that yielded (cells) ended before their outcome was handed out, by reason: expired (nobody waited for the time to live), evicted (past the cap on cells), unclaimed (finished, outcome never taken)."
    );
    for reason in ["expired", "evicted", "unclaimed"] {
        metrics::counter!(names::CELLS_REAPED_TOTAL, "reason" => reason).absolute(0);
    }
    let outcomes = OutcomeKind::ALL.iter().map(|kind| kind.as_str()).chain(["refused", "shutdown"]);
    for outcome in outcomes {
        metrics::counter!(names::EXECUTIONS_TOTAL, "outcome" => outcome).absolute(0);
    }
    // Registered without a sample, a histogram renders its buckets at zero.
    let _ = metrics::histogram!(names::EXECUTION_DURATION_SECONDS, "engine" => engine);
    let _ = metrics::histogram!(names::CALL_DURATION_SECONDS);
    metrics::gauge!(names::ENGINES_LIVE, "engine" => engine).set(0.0);
    metrics::gauge!(names::STUCK_ENGINES).set(0.0);
    Ok(handle)
}

/// The admin port, bound; [`Admin::serve`] answers on it.
pub(crate) struct Admin {
    listener: tokio::net::TcpListener,
    state: State,
}

/// What the handlers read: the daemon's health once it is bound, and the exporter.
#[derive(Clone)]
struct State {
    health: Arc<OnceLock<DaemonHealth>>,
    metrics: PrometheusHandle,
}

impl Admin {
    /// Bind `address` (`HOST:PORT`; port 0 picks one) on the current runtime. Until
    /// `health` is set the daemon is starting: `/readyz` answers 503.
    pub(crate) async fn bind(
        address: &str,
        health: Arc<OnceLock<DaemonHealth>>,
        metrics: PrometheusHandle,
    ) -> Result<Admin, String> {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| format!("cannot listen on the admin address {address}: {e}"))?;
        Ok(Admin { listener, state: State { health, metrics } })
    }

    /// The address bound (port 0 resolved).
    pub(crate) fn local_addr(&self) -> Result<SocketAddr, String> {
        self.listener.local_addr().map_err(|e| format!("the admin listener has no address: {e}"))
    }

    /// Answer probes and scrapes until the process ends; fold histogram samples meanwhile.
    pub(crate) async fn serve(self) {
        let metrics = self.state.metrics.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(UPKEEP).await;
                metrics.run_upkeep();
            }
        });
        if let Err(problem) = axum::serve(self.listener, router(self.state)).await {
            tracing::error!(error = %problem, "the admin port stopped");
        }
    }
}

fn router(state: State) -> Router {
    let live = state.clone();
    let ready = state.clone();
    Router::new()
        .route("/livez", get(move || std::future::ready(liveness(live.health.get()))))
        .route("/readyz", get(move || std::future::ready(readiness(ready.health.get()))))
        .route("/metrics", get(move || std::future::ready(exposition(&state))))
        .fallback(|| std::future::ready((StatusCode::NOT_FOUND, "not found")))
}

/// `/livez`: 200 `ok` unless the daemon's runtime missed its heartbeat (503 `stalled`).
fn liveness(health: Option<&DaemonHealth>) -> (StatusCode, &'static str) {
    match health {
        Some(health) if !health.is_live() => (StatusCode::SERVICE_UNAVAILABLE, "stalled"),
        _ => (StatusCode::OK, "ok"),
    }
}

/// `/readyz`: 200 `ok` while serving; 503 `starting` before, `draining` once a drain
/// began, `stuck` while more engines are stuck than `max_stuck_engines`.
fn readiness(health: Option<&DaemonHealth>) -> (StatusCode, &'static str) {
    match health {
        Some(health) if health.is_ready() => (StatusCode::OK, "ok"),
        Some(health) if health.is_draining() => (StatusCode::SERVICE_UNAVAILABLE, "draining"),
        Some(health) if health.too_many_stuck() => (StatusCode::SERVICE_UNAVAILABLE, "stuck"),
        _ => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
    }
}

/// `/metrics`: the exporter's text, in the exposition format 0.0.4; the stuck engines
/// counted at the scrape rather than at the daemon's last heartbeat.
fn exposition(state: &State) -> Response {
    if let Some(health) = state.health.get() {
        metrics::gauge!(names::STUCK_ENGINES).set(health.stuck_engines() as f64);
    }
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], state.metrics.render()).into_response()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use codemode_executor::Executor;
    use codemode_executor::daemon::{Address, Daemon, DaemonConfig, HEARTBEAT_MISSED};

    use super::*;

    /// `GET path` on the admin port: the status line and the body.
    fn get(address: SocketAddr, path: &str) -> (String, String) {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n").unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_owned(), body.to_owned())
    }

    /// A daemon whose runtime is blocked (a task that never yields) misses its heartbeat:
    /// `/livez` turns 503 `stalled` within [`HEARTBEAT_MISSED`] and a little, answered by
    /// the admin port's own runtime all along.
    #[test]
    fn a_wedged_daemon_runtime_is_not_live_and_the_admin_port_still_says_so() {
        let socket = std::env::temp_dir().join(format!("codemode-admin-wedged-{}.sock", std::process::id()));
        let (health_sender, health) = std::sync::mpsc::channel();
        let daemon_socket = socket.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let daemon = Daemon::bind(DaemonConfig::new(Address::Unix(daemon_socket))).await.unwrap();
                health_sender.send(daemon.health()).unwrap();
                tokio::spawn(daemon.serve(Executor::default()));
                tokio::time::sleep(Duration::from_millis(300)).await;
                // Wedged: nothing else on this runtime runs, the heartbeat included.
                std::thread::sleep(HEARTBEAT_MISSED + Duration::from_secs(3));
            });
        });
        let shared = Arc::new(OnceLock::new());
        let _ = shared.set(health.recv_timeout(Duration::from_secs(10)).unwrap());
        let (address_sender, address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let metrics = PrometheusBuilder::new().build_recorder().handle();
                let admin = Admin::bind("127.0.0.1:0", shared, metrics).await.unwrap();
                address_sender.send(admin.local_addr().unwrap()).unwrap();
                admin.serve().await;
            });
        });
        let address = address.recv_timeout(Duration::from_secs(10)).unwrap();
        let started = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(get(address, "/livez"), ("HTTP/1.1 200 OK".to_owned(), "ok".to_owned()));
        assert_eq!(get(address, "/readyz"), ("HTTP/1.1 200 OK".to_owned(), "ok".to_owned()));
        loop {
            let (status, body) = get(address, "/livez");
            if status != "HTTP/1.1 200 OK" {
                assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 503 Service Unavailable", "stalled"));
                break;
            }
            assert!(started.elapsed() < HEARTBEAT_MISSED + Duration::from_secs(2), "still live");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(started.elapsed() >= HEARTBEAT_MISSED - Duration::from_secs(1), "{:?}", started.elapsed());
        let _ = std::fs::remove_file(&socket);
    }

    #[test]
    fn before_the_daemon_is_bound_it_is_live_and_starting() {
        assert_eq!(liveness(None), (StatusCode::OK, "ok"));
        assert_eq!(readiness(None), (StatusCode::SERVICE_UNAVAILABLE, "starting"));
        // Bound but not yet serving: the same.
        let bound = DaemonHealth::default();
        assert_eq!(liveness(Some(&bound)), (StatusCode::OK, "ok"));
        assert_eq!(readiness(Some(&bound)), (StatusCode::SERVICE_UNAVAILABLE, "starting"));
    }
}
