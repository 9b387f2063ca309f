//! Calls a person approves, on the suite's engine: held before the dispatch, decided from
//! the API, the run's wall clock paused while held.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{config, json};
use codemode_executor::{
    ApprovalPolicy, Approvals, Decided, Decision, DecisionError, Event, Executor, HeldCall, Provider,
    Request, Toolbox,
};
use codemode_protocol::{Outcome, ProviderDescriptor, ToolCall};

/// A dispatch that counts the calls it gets and answers with their arguments.
fn store(seen: Arc<AtomicUsize>) -> impl codemode_protocol::Dispatch {
    move |call: ToolCall| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move { format!(r#"{{"result":{{"deleted":{}}}}}"#, call.args_json) }
    }
}

fn request(code: &str, seen: &Arc<AtomicUsize>) -> Request {
    Request::new(code)
        .provider(ProviderDescriptor::new("store", ["delete", "list"]))
        .dispatch(store(seen.clone()))
}

fn asking() -> ApprovalPolicy {
    ApprovalPolicy::new().ask("store.delete".parse().unwrap())
}

/// The calls held once `n` are.
async fn held(approvals: &Approvals, n: usize) -> Vec<HeldCall> {
    for _ in 0..5000 {
        let held = approvals.held();
        if held.len() >= n {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("{n} calls were never held")
}

fn run(request: Request) -> tokio::task::JoinHandle<Outcome> {
    tokio::spawn(async move { Executor::new(config()).execute(request).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_reaches_dispatch_only_once_approved() {
    let (seen, approvals) = (Arc::new(AtomicUsize::new(0)), Approvals::new());
    let code = "async () => [await store.list(), await store.delete(7)]";
    let outcome = run(request(code, &seen).approvals(asking(), &approvals));
    let held = held(&approvals, 1).await;
    assert_eq!(
        (held[0].provider.as_str(), held[0].tool.as_str(), held[0].arguments.as_str(), held[0].call),
        ("store", "delete", "[7]", 2)
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1, "only the list call passed");
    approvals.decide(held[0].id, Decision::Approve).unwrap();
    assert_eq!(json(&outcome.await.unwrap()), r#"{"result":[{"deleted":[]},{"deleted":[7]}],"logs":[]}"#);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert_eq!(approvals.decide(held[0].id, Decision::Approve), Err(DecisionError::NotHeld(held[0].id)));
    assert_eq!(seen.load(Ordering::SeqCst), 2, "a second decision dispatches nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_and_the_approval_timeout_reject_with_their_texts_and_edits_reach_dispatch() {
    let seen = Arc::new(AtomicUsize::new(0));
    let code = "async () => { try { return await store.delete(7) } catch (e) { return e.message } }";
    let approvals = Approvals::new();
    let denied = run(request(code, &seen).approvals(asking(), &approvals));
    approvals.decide(held(&approvals, 1).await[0].id, Decision::Deny("too risky".into())).unwrap();
    assert_eq!(
        json(&denied.await.unwrap()),
        r#"{"result":"The call store.delete was denied: too risky","logs":[]}"#
    );

    let quick = asking().timeout(Some(Duration::from_millis(100)));
    let timed_out =
        Executor::new(config()).execute(request(code, &seen).approvals(quick, &Approvals::new())).await;
    assert_eq!(
        json(&timed_out),
        r#"{"result":"The call store.delete was not approved within 100 ms, so it was not made.","logs":[]}"#
    );
    assert_eq!(seen.load(Ordering::SeqCst), 0);

    let edited = run(request(code, &seen).approvals(asking(), &approvals));
    let id = held(&approvals, 1).await[0].id;
    assert_eq!(
        approvals.decide(id, Decision::ApproveWith("[8".into())).unwrap_err().to_string(),
        "The edited arguments for held call 2 are not JSON (EOF while parsing a list at line 1 column 2); send an array or an object."
    );
    approvals.decide(id, Decision::ApproveWith("[8]".into())).unwrap();
    assert_eq!(json(&edited.await.unwrap()), r#"{"result":{"deleted":[8]},"logs":[]}"#);
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

/// The wall clock stops while a person decides: `timeoutMs: 300`, approved after 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wall_clock_is_paused_while_a_call_is_held() {
    let (seen, approvals) = (Arc::new(AtomicUsize::new(0)), Approvals::new());
    let code = "async () => await store.delete(7)";
    let outcome =
        run(request(code, &seen).timeout(Duration::from_millis(300)).approvals(asking(), &approvals));
    let id = held(&approvals, 1).await[0].id;
    tokio::time::sleep(Duration::from_secs(1)).await;
    approvals.decide(id, Decision::Approve).unwrap();
    assert_eq!(json(&outcome.await.unwrap()), r#"{"result":{"deleted":[7]},"logs":[]}"#);
    // Still a deadline after the hold: the time held is added, no more.
    let spins = "async () => { await store.delete(7); for (;;) {} }";
    let outcome =
        run(request(spins, &seen).timeout(Duration::from_millis(300)).approvals(asking(), &approvals));
    let id = held(&approvals, 1).await[0].id;
    tokio::time::sleep(Duration::from_millis(500)).await;
    approvals.decide(id, Decision::Approve).unwrap();
    assert_eq!(
        json(&outcome.await.unwrap()),
        r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":[]}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_held_together_are_listed_and_decided_together() {
    let (seen, approvals) = (Arc::new(AtomicUsize::new(0)), Approvals::new());
    let code = "async () => await Promise.all([store.delete(1), store.delete(2)])";
    let events = Arc::new(Mutex::new(Vec::new()));
    let heard = events.clone();
    let request = request(code, &seen).approvals(asking(), &approvals).on_event(move |event| {
        if matches!(event, Event::CallHeld { .. } | Event::CallDecided { .. }) {
            heard.lock().unwrap().push(event.clone());
        }
    });
    let outcome = run(request);
    let held = held(&approvals, 2).await;
    assert_eq!(
        held.iter().map(|h| (h.call, h.arguments.as_str())).collect::<Vec<_>>(),
        [(1, "[1]"), (2, "[2]")]
    );
    assert_eq!(held[0].execution, held[1].execution);
    let ids: Vec<_> = held.iter().map(|h| h.id).collect();
    assert_eq!(approvals.decide_all(&ids, &Decision::Approve), [Ok(()), Ok(())]);
    assert_eq!(json(&outcome.await.unwrap()), r#"{"result":[{"deleted":[1]},{"deleted":[2]}],"logs":[]}"#);
    assert_eq!(
        approvals.decide_all(&ids, &Decision::Approve),
        [Err(DecisionError::NotHeld(ids[0])), Err(DecisionError::NotHeld(ids[1]))]
    );
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    let events = events.lock().unwrap().clone();
    let decided: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::CallDecided { decided: Decided::Approved, .. }))
        .collect();
    assert_eq!((events.len(), decided.len()), (4, 2), "{events:?}");
    assert!(
        matches!(&events[0], Event::CallHeld { provider, tool, .. } if provider == "store" && tool == "delete")
    );
}

/// A toolbox tool marked as needing approval says so in the declarations, and is refused
/// where the request has nobody to ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_tool_says_so_and_is_refused_without_approvals() {
    let toolbox = Toolbox::new([Provider::new("files")
        .sync_tool("remove", "Remove a file.", |path: String, _| Ok::<_, String>(format!("removed {path}")))
        .needs_approval("remove")])
    .unwrap();
    assert!(toolbox.declarations().contains("Each call waits for a person's approval before it runs"));
    let code = "async () => { try { return await files.remove('a') } catch (e) { return e.message } }";
    let outcome = Executor::new(config()).execute(Request::new(code).toolbox(&toolbox)).await;
    assert_eq!(
        json(&outcome),
        r#"{"result":"The call files.remove needs a person's approval, and this host has no way to ask for it, so it was not made.","logs":[]}"#
    );
    let approvals = Approvals::asking(|_| async { Decision::Approve });
    let request = Request::new(code).toolbox(&toolbox).approvals(ApprovalPolicy::new(), &approvals);
    assert_eq!(json(&Executor::new(config()).execute(request).await), r#"{"result":"removed a","logs":[]}"#);
}

/// A daemon in this process on a Unix socket running the suite's engine, and a client of it.
async fn through_a_daemon() -> codemode_executor::RemoteExecutor {
    use codemode_executor::daemon::{Address, Daemon, DaemonConfig, DaemonLimits};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("codemode-approvals-{}-{n}.sock", std::process::id()));
    let daemon =
        Daemon::bind_with(DaemonConfig::new(Address::Unix(path)), DaemonLimits::default()).await.unwrap();
    let address = daemon.address().to_string();
    tokio::spawn(daemon.serve(Executor::new(config())));
    codemode_executor::RemoteExecutor::connect(&address, None).await.unwrap()
}

/// Over a daemon the policy and the decision stay here; the daemon is told the call is
/// held, so its deadline pauses: `timeoutMs: 300`, approved after 1 s, still a result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_daemon_the_held_time_is_not_charged_to_the_deadline() {
    let remote = through_a_daemon().await;
    let (seen, approvals) = (Arc::new(AtomicUsize::new(0)), Approvals::new());
    let request = request("async () => await store.delete(7)", &seen)
        .timeout(Duration::from_millis(300))
        .approvals(asking(), &approvals);
    let outcome = tokio::spawn(async move { remote.execute(request).await });
    let id = held(&approvals, 1).await[0].id;
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    approvals.decide(id, Decision::Approve).unwrap();
    assert_eq!(json(&outcome.await.unwrap()), r#"{"result":{"deleted":[7]},"logs":[]}"#);
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}
