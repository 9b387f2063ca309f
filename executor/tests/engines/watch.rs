//! Watching a run (`Request::on_event`): the events a host sees, in order, and that a
//! hostile program or a broken callback changes nothing but what the watcher sees.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_executor::{Event, Request};
use codemode_protocol::{OutcomeKind, ProviderDescriptor, ToolCall};

use crate::support::{executor, json};

/// Every event as a line, durations left out (they are checked apart).
fn line(event: &Event) -> String {
    match event {
        Event::CallStarted { call, provider, tool, arguments } => {
            format!("start {call} {provider}.{tool} {arguments}")
        }
        Event::CallEnded { call, provider, tool, error, .. } => {
            format!("end {call} {provider}.{tool} {}", error.as_deref().unwrap_or("ok"))
        }
        Event::Log { level, line } => format!("log {level:?} {line}"),
        Event::Waiting { calls, timers } => format!("waiting calls={calls} timers={timers}"),
        Event::Dropped { events } => format!("dropped {events}"),
        other => format!("{other:?}"),
    }
}

fn recorded() -> (Arc<Mutex<Vec<Event>>>, impl Fn(&Event) + Send + Sync + 'static) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    (events, move |event: &Event| sink.lock().unwrap().push(event.clone()))
}

/// `store.get` answers after 30 ms with its argument, `store.fail` refuses at once.
fn store(request: Request) -> Request {
    request.provider(ProviderDescriptor::new("store", ["get", "fail"])).dispatch(
        |call: ToolCall| async move {
            match call.tool.as_str() {
                "get" => {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    format!("{{\"result\":{}}}", call.args_json)
                }
                _ => r#"{"error":"no such order"}"#.to_owned(),
            }
        },
    )
}

#[tokio::test]
async fn a_watcher_sees_calls_logs_and_waits_in_the_order_they_happen() {
    let code = r#"async () => {
        console.log("start");
        const [order] = await store.get({ id: 7 });
        try { await store.fail(order.id); } catch (e) { console.warn("caught", e.message); }
        await store.get("x".repeat(400)).catch((e) => console.error(e.message));
        return order;
    }"#;
    let (events, callback) = recorded();
    let request = store(Request::new(code)).max_payload_bytes(300).on_event(callback);
    let outcome = executor().execute(request).await;
    let refusal = "Tool call payload is 412 bytes, over the limit of 300 bytes (provider, tool and arguments together). Send less per call.";
    assert_eq!(
        json(&outcome),
        format!(
            r#"{{"result":{{"id":7}},"logs":["start","[warn] caught no such order","[error] {refusal}"]}}"#
        )
    );
    let events = events.lock().unwrap().clone();
    let lines: Vec<String> = events.iter().map(line).collect();
    let cut = format!(r#"["{}…"#, "x".repeat(251)); // 256 bytes with the `…`
    assert_eq!(
        lines,
        [
            "log Log start".to_owned(),
            r#"start 1 store.get [{"id":7}]"#.to_owned(),
            "waiting calls=1 timers=0".to_owned(),
            "end 1 store.get ok".to_owned(),
            "start 2 store.fail [7]".to_owned(),
            "end 2 store.fail no such order".to_owned(),
            "log Warn [warn] caught no such order".to_owned(),
            format!("start 3 store.get {cut}"),
            format!("end 3 store.get {refusal}"),
            format!("log Error [error] {refusal}"),
        ]
    );
    let Event::CallEnded { duration, .. } = &events[3] else { unreachable!() };
    assert!(*duration >= Duration::from_millis(30), "the call took {duration:?}");
}

#[tokio::test]
async fn a_call_without_a_dispatch_is_watched_with_its_refusal() {
    let (events, callback) = recorded();
    let request = Request::new("async () => await store.get(1)")
        .provider(ProviderDescriptor::new("store", ["get"]))
        .on_event(callback);
    let outcome = executor().execute(request).await;
    assert_eq!(outcome.error_text(), Some(r#"Tool "get" not found"#));
    let lines: Vec<String> = events.lock().unwrap().iter().map(line).collect();
    assert_eq!(lines, ["start 1 store.get [1]", r#"end 1 store.get Tool "get" not found"#]);
}

#[tokio::test]
async fn a_watcher_hears_what_a_run_waits_on_timers_included() {
    let code = r#"async () => {
        setInterval(() => {}, 10000);
        await new Promise((resolve) => setTimeout(resolve, 20));
        console.debug("timer");
        console.info("done");
        await new Promise(() => {});
    }"#;
    let (events, callback) = recorded();
    let outcome =
        executor().execute(Request::new(code).timeout(Duration::from_millis(300)).on_event(callback)).await;
    assert_eq!(outcome.kind(), OutcomeKind::Timeout);
    let lines: Vec<String> = events.lock().unwrap().iter().map(line).collect();
    assert_eq!(
        lines,
        ["waiting calls=0 timers=2", "log Debug timer", "log Info done", "waiting calls=0 timers=1"]
    );
}

#[tokio::test]
async fn a_million_log_lines_reach_the_watcher_only_as_far_as_the_log_bound() {
    let code = r#"async () => { for (let i = 0; i < 1e6; i++) console.log("line " + i); return 1 }"#;
    let (lines, bytes, dropped) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (l, b, d) = (lines.clone(), bytes.clone(), dropped.clone());
    let max_log_bytes = 64 * 1024;
    let request = Request::new(code).max_log_bytes(max_log_bytes).on_event(move |event| match event {
        Event::Log { line, .. } => {
            l.fetch_add(1, Ordering::Relaxed);
            b.fetch_add(line.len(), Ordering::Relaxed);
        }
        Event::Dropped { events } => {
            d.fetch_add(*events as usize, Ordering::Relaxed);
        }
        _ => {}
    });
    let outcome = executor().execute(request).await;
    assert_eq!(outcome.kind(), OutcomeKind::Returned);
    let kept = outcome.logs().len();
    assert!(kept < 10_000, "{kept} lines kept");
    assert_eq!(
        outcome.logs().last().unwrap(),
        "[codemode] Log limit of 65536 bytes reached; later logs are dropped."
    );
    // Every kept line, the marker included, was heard or counted as dropped; nothing else was sent.
    assert_eq!(lines.load(Ordering::Relaxed) + dropped.load(Ordering::Relaxed), kept);
    assert!(bytes.load(Ordering::Relaxed) <= max_log_bytes + 100);
}

#[tokio::test]
async fn a_slow_watcher_loses_events_as_counted_drops_not_memory() {
    let code =
        r#"async () => { for (let i = 0; i < 5000; i++) await store.fail(i).catch(() => {}); return 1 }"#;
    let (heard, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (h, d) = (heard.clone(), dropped.clone());
    let request = store(Request::new(code)).on_event(move |event| {
        if let Event::Dropped { events } = event {
            d.fetch_add(*events as usize, Ordering::Relaxed);
        } else {
            h.fetch_add(1, Ordering::Relaxed);
            // A slow host: the program makes events far faster than this reads them.
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    let outcome = executor().execute(request).await;
    assert_eq!(json(&outcome), r#"{"result":1,"logs":[]}"#);
    // Two events per call, each heard or counted as dropped.
    assert_eq!(heard.load(Ordering::Relaxed) + dropped.load(Ordering::Relaxed), 10_000);
}

#[tokio::test]
async fn a_panicking_callback_is_dropped_and_the_run_goes_on() {
    let code =
        r#"async () => { console.log("a"); const [x] = await store.get(1); console.log("b"); return x }"#;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let request = store(Request::new(code)).on_event(move |_| {
        seen.fetch_add(1, Ordering::Relaxed);
        panic!("the host's callback is broken");
    });
    let outcome = executor().execute(request).await;
    assert_eq!(json(&outcome), r#"{"result":1,"logs":["a","b"]}"#);
    assert_eq!(calls.load(Ordering::Relaxed), 1, "a callback that panicked is not called again");
    // The executor is unharmed.
    let next = executor().execute(Request::new("async () => 2")).await;
    assert_eq!(json(&next), r#"{"result":2,"logs":[]}"#);
}

/// What Ctrl-C does in `codemode run`: drop a watched run that waits for ever. Its engine
/// goes, and the host keeps the logs it heard.
#[tokio::test]
async fn dropping_a_watched_run_ends_its_engine_and_the_logs_heard_stay() {
    let executor = codemode_executor::Executor::new(crate::support::config().workers(1));
    let (events, callback) = recorded();
    let code = r#"async () => { console.log("a"); await new Promise(() => {}) }"#;
    let run = executor.execute(Request::new(code).timeout(Duration::from_secs(60)).on_event(callback));
    assert!(tokio::time::timeout(Duration::from_millis(200), run).await.is_err());
    let lines: Vec<String> = events.lock().unwrap().iter().map(line).collect();
    assert_eq!(lines, ["log Log a", "waiting calls=0 timers=0"]);
    let dropped = std::time::Instant::now();
    while executor.live_engines() > 0 {
        assert!(dropped.elapsed() < Duration::from_secs(3), "the engine outlived its dropped execute");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
