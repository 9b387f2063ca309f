//! `codemode run`'s view of a run as it goes: `--trace` lines on stderr, the waiting
//! indicator, the logs an interrupted run keeps, and the `--output human` form.
//!
//! The shapes (docs/watching.md):
//! `→ store.get({"id":7})`, `← store.get 1.2 ms ok`, `← store.get 0.3 ms error: TEXT`,
//! `log: LINE`, and after a stretch without progress
//! `codemode: no progress for 3 s: waiting on 1 call (store.get) and 1 timer`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use codemode_executor::{Event, Outcome};
use codemode_protocol::{OutcomeKind, texts};

/// A call's arguments in a trace line are cut to this many characters (with `…`).
pub(crate) const TRACE_ARGUMENTS_CHARS: usize = 80;

/// An error text in a trace line is cut to this many characters (with `…`).
pub(crate) const TRACE_ERROR_CHARS: usize = 160;

/// How long a run may go without progress before a terminal hears what it waits on.
pub(crate) const WAITING_AFTER: Duration = Duration::from_secs(3);

/// What `codemode run` prints on stdout.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// The outcome as one JSON object (the default when stdout is not a terminal).
    Json,
    /// For a person: the logs, then the result pretty-printed or the error as text (the
    /// default on a terminal).
    Human,
}

/// What the watcher has heard of the run so far.
struct Heard {
    /// Every log line, for an interrupted run's outcome.
    logs: Vec<String>,
    /// Calls started and not ended: their `provider.tool`.
    pending: BTreeMap<u64, String>,
    /// What the run said it waits on, when that was the last thing it said.
    waiting: Option<(usize, usize)>,
    last_progress: Instant,
    /// The waiting line was printed for this stretch without progress.
    announced: bool,
}

/// The watch on one `codemode run`.
#[derive(Clone)]
pub(crate) struct Watch {
    heard: Arc<Mutex<Heard>>,
    trace: bool,
}

impl Watch {
    pub(crate) fn new(trace: bool) -> Watch {
        let heard = Heard {
            logs: Vec::new(),
            pending: BTreeMap::new(),
            waiting: None,
            last_progress: Instant::now(),
            announced: false,
        };
        Watch { heard: Arc::new(Mutex::new(heard)), trace }
    }

    /// The request's event callback.
    pub(crate) fn hear(&self, event: &Event) {
        let mut heard = lock(&self.heard);
        if let Event::Waiting { calls, timers } = event {
            heard.waiting = Some((*calls, *timers));
            return;
        }
        heard.waiting = None;
        heard.last_progress = Instant::now();
        heard.announced = false;
        match event {
            Event::CallStarted { call, provider, tool, .. } => {
                heard.pending.insert(*call, format!("{provider}.{tool}"));
            }
            Event::CallEnded { call, .. } => {
                heard.pending.remove(call);
            }
            Event::Log { line, .. } => heard.logs.push(line.clone()),
            _ => {}
        }
        drop(heard);
        if self.trace
            && let Some(line) = trace_line(event)
        {
            // A closed stderr is no reason to end the run.
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    /// The logs heard so far.
    pub(crate) fn logs(&self) -> Vec<String> {
        lock(&self.heard).logs.clone()
    }

    /// Print the waiting line once per stretch of `after` without progress, until dropped.
    pub(crate) async fn announce_waits(self, after: Duration) {
        let tick = (after / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
        loop {
            tokio::time::sleep(tick).await;
            let mut heard = lock(&self.heard);
            let quiet = heard.last_progress.elapsed();
            if heard.announced || quiet < after {
                continue;
            }
            heard.announced = true;
            let line = waiting_line(after, &heard);
            drop(heard);
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }
}

/// `codemode: no progress for 3 s: waiting on ...`.
fn waiting_line(after: Duration, heard: &Heard) -> String {
    let calls = heard.pending.len();
    let names = || {
        let mut names: Vec<&str> = heard.pending.values().take(3).map(String::as_str).collect();
        if calls > 3 {
            names.push("…");
        }
        names.join(", ")
    };
    let what = match heard.waiting {
        Some((0, 0)) => "waiting on a promise nothing will settle; the run ends at its timeout".to_owned(),
        Some((in_flight, timers)) => {
            let mut parts = Vec::new();
            if in_flight > 0 {
                let named = if calls > 0 { format!(" ({})", names()) } else { String::new() };
                parts.push(format!("{in_flight} {}{named}", plural(in_flight, "call", "calls")));
            }
            if timers > 0 {
                parts.push(format!("{timers} {}", plural(timers, "timer", "timers")));
            }
            format!("waiting on {}", parts.join(" and "))
        }
        None if calls > 0 => format!("waiting on {calls} {} ({})", plural(calls, "call", "calls"), names()),
        None => "the program is running".to_owned(),
    };
    format!("codemode: no progress for {}: {what}", seconds(after))
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// `3 s`, `0.5 s`.
fn seconds(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// The trace line of an event, if it has one.
pub(crate) fn trace_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::CallStarted { provider, tool, arguments, .. } => {
            format!("→ {provider}.{tool}({})", cut(inside_array(arguments), TRACE_ARGUMENTS_CHARS))
        }
        Event::CallEnded { provider, tool, duration, error, .. } => {
            let ended = match error {
                None => "ok".to_owned(),
                Some(text) => format!("error: {}", cut(text, TRACE_ERROR_CHARS)),
            };
            format!("← {provider}.{tool} {} {ended}", millis(*duration))
        }
        Event::Log { line, .. } => format!("log: {line}"),
        Event::Dropped { events } => {
            format!("… {events} events not shown: the program made them faster than they were printed")
        }
        _ => return None,
    })
}

/// Positional arguments without their array's brackets: `[{"id":7},2]` reads `{"id":7},2`.
fn inside_array(arguments: &str) -> &str {
    let Some(inner) = arguments.strip_prefix('[') else { return arguments };
    inner.strip_suffix(']').unwrap_or(inner)
}

/// `text` cut to `max` characters, the last one `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut kept: String = text.chars().take(max - 1).collect();
    kept.push('…');
    kept
}

/// `1.2 ms`, `1520.0 ms`.
fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// The outcome of a run Ctrl-C ended, with the logs heard until then.
pub(crate) fn interrupted(logs: Vec<String>) -> Outcome {
    Outcome::failure(OutcomeKind::Cancelled, texts::INTERRUPTED, logs)
}

/// The outcome for a person: the logs (unless `--trace` showed them), then
/// `result: VALUE` pretty-printed, or `error (KIND): TEXT`.
pub(crate) fn human(outcome: &Outcome, with_logs: bool) -> String {
    let mut text = String::new();
    if with_logs {
        for line in outcome.logs() {
            text.push_str(&format!("log: {line}\n"));
        }
    }
    match outcome.error_display() {
        Some(error) => text.push_str(&format!("error ({}): {error}", outcome.kind())),
        None => {
            let json = serde_json::to_value(outcome).unwrap_or_default();
            let result = match json.get("result") {
                Some(value) => serde_json::to_string_pretty(value).unwrap_or_default(),
                None => "undefined".to_owned(),
            };
            text.push_str(&format!("result: {result}"));
        }
    }
    text
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_lines_have_their_documented_shape() {
        let started = Event::CallStarted {
            call: 1,
            provider: "store".into(),
            tool: "get".into(),
            arguments: r#"[{"id":7}]"#.into(),
        };
        assert_eq!(trace_line(&started).unwrap(), r#"→ store.get({"id":7})"#);
        let long = Event::CallStarted {
            call: 2,
            provider: "db".into(),
            tool: "query".into(),
            arguments: format!(r#"["{}"]"#, "x".repeat(200)),
        };
        assert_eq!(trace_line(&long).unwrap(), format!(r#"→ db.query("{}…)"#, "x".repeat(78)));
    }
}
