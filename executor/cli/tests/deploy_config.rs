//! The Deployment's serve.toml (executor/deploy/kustomize/base/configmap.yaml) as `codemode serve` runs it: accepted, serving TLS and the admin port, and draining a live run to exit 0 on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codemode_executor::{RemoteExecutor, Request};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of `serve.toml` in the ConfigMap: the block scalar under `serve.toml: |`.
fn deployed_serve_toml() -> String {
    let yaml = std::fs::read_to_string(root().join("executor/deploy/kustomize/base/configmap.yaml")).unwrap();
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "serve.toml: |").skip(1);
    let mut text = String::new();
    for line in lines.by_ref() {
        if !line.is_empty() && !line.starts_with("    ") {
            break;
        }
        text.push_str(line.strip_prefix("    ").unwrap_or(line));
        text.push('\n');
    }
    assert!(text.contains("[ceilings]"), "no serve.toml block found in configmap.yaml");
    text
}

/// GET `path` on the admin port: the status code and the body, or None when nothing answers.
fn admin_get(admin: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(admin).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, response.split_once("\r\n\r\n")?.1.to_owned()))
}

struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_config_serves_tls_and_drains_a_live_run_to_exit_0_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("codemode-deploy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("serve.toml");
    std::fs::write(&file, deployed_serve_toml()).unwrap();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key, token) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("token"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    std::fs::write(&token, "deploy-t0ken\n").unwrap();

    // The file as deployed; only where it listens and the Secrets' paths differ (flags win).
    let mut child = Served(
        Command::new(env!("CARGO_BIN_EXE_codemode"))
            .args(["serve", "--config", &file.display().to_string(), "--admin", "127.0.0.1:0"])
            .args(["--listen", "tcp:127.0.0.1:0", "--token-file", &token.display().to_string()])
            .args(["--tls-cert", &cert.display().to_string(), "--tls-key", &key.display().to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut log = BufReader::new(child.0.stderr.take().unwrap()).lines();
    // The config logs JSON lines: `listening` (the execution port), then `admin listening`.
    let (mut address, mut admin) = (None, None);
    while address.is_none() || admin.is_none() {
        let line = log.next().expect("the daemon logs where it listens").unwrap();
        let event: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("a JSON line: {line}"));
        let at = event["address"].as_str().map(str::to_owned);
        match event["message"].as_str() {
            Some("listening") => address = at,
            Some("admin listening") => admin = at,
            _ => {}
        }
    }
    let (address, admin) = (address.unwrap(), admin.unwrap());
    let admin = admin.strip_prefix("tcp:").unwrap_or(&admin).to_owned();
    std::thread::spawn(move || log.for_each(drop));

    let started = Instant::now();
    while admin_get(&admin, "/readyz") != Some((200, "ok".to_owned())) {
        assert!(started.elapsed() < Duration::from_secs(10), "/readyz never answered 200 ok");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(admin_get(&admin, "/livez"), Some((200, "ok".to_owned())));

    let remote =
        RemoteExecutor::connect_tls(&address, Some("deploy-t0ken"), &cert, "localhost").await.unwrap();
    assert_eq!(
        remote.execute(Request::new("async () => 6 * 7")).await.to_json_string(),
        r#"{"result":42,"logs":[]}"#
    );

    // A run that is live when SIGTERM arrives completes; the daemon then exits 0.
    let live = tokio::spawn({
        let remote = remote.clone();
        async move {
            remote
                .execute(Request::new(
                    "async () => { await new Promise(r => setTimeout(r, 1500)); return 'drained'; }",
                ))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The HPA's metric (executor/deploy/kustomize/examples/hpa.yaml) counts it.
    let (status, metrics) = admin_get(&admin, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(metrics.lines().any(|l| l == "codemode_executions_in_flight 1"), "{metrics}");
    let killed = Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let draining = Instant::now();
    while admin_get(&admin, "/readyz") != Some((503, "draining".to_owned())) {
        assert!(
            draining.elapsed() < Duration::from_secs(1),
            "/readyz did not turn 503 draining within 1 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(live.await.unwrap().to_json_string(), r#"{"result":"drained","logs":[]}"#);
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(0), "the daemon exits 0 after its drain");
    let _ = std::fs::remove_dir_all(&dir);
}
