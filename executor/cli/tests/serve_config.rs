//! `codemode serve`'s configuration: the TOML file, flags over it, what each section sets,
//! what is refused, and the log lines as text or JSON.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codemode_executor::{
    ConfigError, EngineKind, IsolationKind, LimitError, Limits, LogFormat, ParseEngineError, RemoteExecutor,
    Request, ServeConfig,
};

/// What `codemode serve --config` does with the file's text.
fn from_toml(text: &str) -> Result<ServeConfig, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

const FILE: &str = r#"
listen = "unix:/tmp/codemode.sock"
log_format = "json"

[executor]
workers = 3
isolation = "process"

[limits]
timeout_ms = 2000
memory_limit_bytes = 33554432

[ceilings]
timeout_ms = 5000
memory_limit_bytes = 134217728

[connections]
max_connections = 10
hello_timeout_ms = 1500
idle_timeout_ms = 60000
max_live_executions = 40
"#;

#[test]
fn a_config_file_sets_the_executor_the_limits_and_the_connections() {
    let config = from_toml(FILE).unwrap();
    assert_eq!(config.log_format, Some(LogFormat::Json));
    assert_eq!(config.log_level, None, "info unless set");
    assert_eq!(config.executor.isolation, Some(IsolationKind::Process));
    let executor = config.executor_config().unwrap();
    assert_eq!(executor.workers, 3);
    assert_eq!(executor.engine, EngineKind::QuickJs);
    let command = config.worker_command("/usr/bin/codemode".into()).unwrap().unwrap();
    assert_eq!(command.program, std::path::Path::new("/usr/bin/codemode"));
    assert_eq!(command.args, ["stdio"], "the executor passes its engine to its workers");
    assert_eq!(
        from_toml("").unwrap().worker_command("codemode".into()).unwrap(),
        None,
        "in-process by default"
    );
    assert_eq!(executor.limits.timeout, Duration::from_secs(2));
    assert_eq!(executor.limits.memory_limit_bytes, 32 << 20);
    assert_eq!(executor.limits.max_log_bytes, Limits::default().max_log_bytes);
    assert_eq!(executor.ceilings.timeout, Duration::from_secs(5));
    let limits = config.daemon_limits();
    assert_eq!((limits.max_connections, limits.hello_timeout), (10, Duration::from_millis(1500)));
    assert_eq!(limits.idle_timeout, Duration::from_secs(60));
    assert_eq!(limits.max_live_executions, 40);
    assert_eq!(limits.max_queued_bytes, codemode_executor::daemon::DaemonLimits::default().max_queued_bytes);
    assert_eq!(config.daemon_config().unwrap().listen.to_string(), "unix:/tmp/codemode.sock");
}

#[test]
fn flags_win_over_the_file() {
    let file = from_toml(FILE).unwrap();
    let flags = from_toml("[limits]\ntimeout_ms = 3000\n[connections]\nmax_connections = 2").unwrap();
    let config = file.overridden_by(&flags);
    let executor = config.executor_config().unwrap();
    assert_eq!(executor.limits.timeout, Duration::from_secs(3));
    assert_eq!(executor.limits.memory_limit_bytes, 32 << 20, "what the flags leave out stays the file's");
    assert_eq!(config.daemon_limits().max_connections, 2);
}

#[test]
fn the_admin_port_and_the_drain_timeout_come_from_the_file_or_the_flags() {
    let file = from_toml("admin = \"0.0.0.0:9090\"\ndrain_timeout_ms = 35000\n").unwrap();
    assert_eq!(file.admin.as_deref(), Some("0.0.0.0:9090"));
    assert_eq!(file.drain_timeout(), Duration::from_secs(35));
    let mut flags = ServeConfig::default();
    flags.drain_timeout_ms = Some(300);
    let config = file.overridden_by(&flags);
    assert_eq!(
        (config.admin.as_deref(), config.drain_timeout()),
        (Some("0.0.0.0:9090"), Duration::from_millis(300))
    );
    // Unset: the ceiling on timeout_ms plus the send timeout, so every run allowed can
    // finish and its outcome wait for a slow reader as long as any outcome may.
    assert_eq!(ServeConfig::default().admin, None);
    assert_eq!(ServeConfig::default().drain_timeout(), Duration::from_secs(900 + 10));
    assert_eq!(from_toml("[ceilings]\ntimeout_ms = 5000").unwrap().drain_timeout(), Duration::from_secs(15));
    assert_eq!(
        from_toml("[ceilings]\ntimeout_ms = 5000\n[connections]\nsend_timeout_ms = 2000")
            .unwrap()
            .drain_timeout(),
        Duration::from_secs(7)
    );
}

#[test]
fn what_cannot_run_is_refused_with_what_to_change() {
    let config_error = |text: &str| from_toml(text).unwrap().executor_config().unwrap_err();
    let above = config_error("[limits]\ntimeout_ms = 9000\n[ceilings]\ntimeout_ms = 5000");
    assert!(
        matches!(
            above,
            ConfigError::Limits(LimitError::AboveCeiling {
                limit: "timeoutMs",
                value: 9000,
                ceiling: 5000,
                ..
            })
        ),
        "{above:?}"
    );
    assert_eq!(
        above.to_string(),
        "[limits]: The timeoutMs of 9000 is above this executor's ceiling of 5000; ask for at most 5000."
    );
    let small = config_error("[ceilings]\nmemory_limit_bytes = 1024");
    assert!(matches!(small, ConfigError::Ceilings(LimitError::TooSmall { .. })), "{small:?}");
    let unknown_engine = config_error("[executor]\nengine = \"spidermonkey\"");
    assert!(
        matches!(unknown_engine, ConfigError::Engine(ParseEngineError::Unknown { .. })),
        "{unknown_engine:?}"
    );
    assert_eq!(unknown_engine.to_string(), "unknown engine \"spidermonkey\"; built in: quickjs");
    let no_workers = config_error("[executor]\nworkers = 0");
    assert!(matches!(no_workers, ConfigError::NoWorkers), "{no_workers:?}");
    assert_eq!(no_workers.to_string(), "[executor] workers must be at least 1");
    let spin = config_error("[executor]\nanswer_spin_us = 1001");
    assert!(matches!(spin, ConfigError::AnswerSpinTooLong { micros: 1001, .. }), "{spin:?}");
    assert_eq!(
        spin.to_string(),
        "[executor] answer_spin_us is 1001; it must be at most 1000 (a longer wait awake only burns CPU); 0 never waits awake"
    );
    let unknown = from_toml("[limits]\ntimeout = 5").unwrap_err();
    assert!(unknown.contains("unknown field `timeout`, expected one of `timeout_ms`"), "{unknown}");
    let missing = ServeConfig::default().daemon_config().unwrap_err();
    assert!(matches!(missing, ConfigError::NoListen), "{missing:?}");
    assert_eq!(
        missing.to_string(),
        "say where to listen: --listen unix:/path/to.sock or tcp:HOST:PORT (or `listen` in the config file)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_from_a_config_file_holds_requests_to_its_ceilings_and_logs_json_lines() {
    let dir = std::env::temp_dir().join(format!("codemode-serve-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("d.sock");
    let file = dir.join("serve.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"unix:{}\"\nlog_format = \"json\"\nlog_level = \"debug\"\n[limits]\ntimeout_ms = 1000\n[ceilings]\nmemory_limit_bytes = 134217728\n",
            socket.display()
        ),
    )
    .unwrap();
    let mut child = Served(
        Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(["serve", "--config", &file.display().to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut log = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&log.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["level"], "INFO");
    assert_eq!(first["message"], "listening");
    let started = Instant::now();
    let remote = loop {
        match RemoteExecutor::connect(&format!("unix:{}", socket.display()), None).await {
            Ok(remote) => break remote,
            Err(_) if started.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(problem) => panic!("{problem}"),
        }
    };
    let timed_out = remote.execute(Request::new("async () => { for (;;) {} }")).await;
    assert_eq!(
        timed_out.to_json_string(),
        r#"{"error":"Execution timed out after 1000 ms.","kind":"timeout","logs":[]}"#
    );
    let above = remote.execute(Request::new("async () => 1").memory_limit_bytes(256 << 20)).await;
    assert_eq!(
        above.to_json_string(),
        r#"{"error":"The memoryLimitBytes of 268435456 is above this executor's ceiling of 134217728; ask for at most 134217728.","kind":"invalid","logs":[]}"#
    );
    let dispatch = |_call| async { r#"{"error":"no such user"}"#.to_owned() };
    let called =
        Request::new("async () => { try { await store.find('s3cr3t') } catch (e) { return e.message } }")
            .provider(codemode_executor::ProviderDescriptor::new("store", ["find"]))
            .dispatch(dispatch);
    assert_eq!(remote.execute(called).await.to_json_string(), r#"{"result":"no such user","logs":[]}"#);
    drop(remote);
    // The client has its outcome before the daemon logs the end: read until the three ends
    // are logged (bounded), and only then stop the daemon.
    let (sender, lines_read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in log.map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines: Vec<serde_json::Value> = Vec::new();
    while lines.iter().filter(|l| l["message"] == "execution ended").count() < 3 {
        match lines_read.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => lines.extend(serde_json::from_str(&line).ok()),
            Err(_) => break,
        }
    }
    drop(child);
    let mut ended: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["message"] == "execution ended").collect();
    // In execution order: one's line may follow the next one's, whose execute its outcome let go.
    ended.sort_by_key(|l| l["span"]["id"].as_u64());
    assert_eq!(ended.len(), 3, "{lines:?}");
    assert_eq!(ended[0]["outcome"], "timeout");
    assert_eq!(ended[1]["outcome"], "invalid");
    assert_eq!(ended[2]["outcome"], "returned");
    // Each execution's events in its own span, inside its connection's.
    assert_eq!(ended[0]["span"], serde_json::json!({"name": "execution", "id": 1}));
    assert_eq!(ended[0]["spans"][0]["name"], "connection");
    assert_eq!(ended[0]["spans"][0]["peer"], "unix");
    // At debug, each call: provider, tool, duration and whether it failed; never its
    // arguments or its answer.
    let calls: Vec<&serde_json::Value> = lines.iter().filter(|l| l["message"] == "call answered").collect();
    assert_eq!(calls.len(), 1, "{lines:?}");
    assert_eq!(calls[0]["level"], "DEBUG");
    assert_eq!(calls[0]["error"], true);
    assert!(calls[0]["duration_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(
        calls[0]["span"],
        serde_json::json!({"name": "call", "call": 1, "provider": "store", "tool": "find"})
    );
    assert_eq!(calls[0]["spans"][1], serde_json::json!({"name": "execution", "id": 3}));
    let all = lines.iter().map(|l| l.to_string()).collect::<String>();
    assert!(!all.contains("s3cr3t") && !all.contains("no such user"), "{all}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A daemon child process, killed and reaped however the test ends.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_bad_config_file_exits_2_saying_where() {
    let dir = std::env::temp_dir().join(format!("codemode-serve-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("serve.toml");
    std::fs::write(&file, "listen = \"unix:/tmp/x.sock\"\n[conections]\nmax_connections = 2\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["serve", "--config", &file.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.starts_with(&format!("codemode: the config file {}: ", file.display())), "{stderr}");
    assert!(stderr.contains("unknown field `conections`"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn confinement_is_set_in_the_executor_section_and_an_unknown_level_is_refused() {
    let config = from_toml("[executor]\nisolation = \"process\"\nconfinement = \"best-effort\"\n").unwrap();
    let executor = config.executor_config().unwrap();
    assert_eq!(executor.confinement, codemode_executor::Confinement::BestEffort);
    let default = from_toml(FILE).unwrap().executor_config().unwrap();
    assert_eq!(default.confinement, codemode_executor::Confinement::default());
    let refused = from_toml("[executor]\nconfinement = \"strict\"\n").unwrap_err();
    assert!(
        refused.contains("unknown variant `strict`, expected one of `required`, `best-effort`, `off`"),
        "{refused}"
    );
}

#[test]
fn the_answer_spin_is_set_in_microseconds_and_defaults_to_fifty() {
    let executor = |text: &str| from_toml(text).unwrap().executor_config().unwrap();
    assert_eq!(executor("").answer_spin, Duration::from_micros(50));
    assert_eq!(codemode_executor::DEFAULT_ANSWER_SPIN, Duration::from_micros(50));
    assert_eq!(executor("[executor]\nanswer_spin_us = 0").answer_spin, Duration::ZERO);
    assert_eq!(executor("[executor]\nanswer_spin_us = 1000").answer_spin, Duration::from_millis(1));
}

#[test]
fn the_answer_spin_flag_is_checked_as_the_file_is() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_codemode"))
        .args(["serve", "--listen", "unix:/tmp/codemode-answer-spin.sock", "--answer-spin-us", "5000"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A daemon that took the value would serve on: it is killed, and the test fails.
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        String::from_utf8(output.stderr).unwrap(),
        "codemode: [executor] answer_spin_us is 5000; it must be at most 1000 (a longer wait awake only burns CPU); 0 never waits awake\n"
    );
}
