//! Long builtins stop at the deadline, engine included: each program here spends its time
//! inside one native loop (vendor/rquickjs-sys/PATCHES.md, section 2), which stock QuickJS
//! runs to its end (for some, never) without asking the interrupt handler.

use std::time::{Duration, Instant};

use codemode_executor::{Executor, Request};
use codemode_protocol::OutcomeKind;

const TIMEOUT: Duration = Duration::from_millis(300);
/// The engine must be idle this soon after the deadline: the patched loops stop within
/// about 10 ms (PATCHES.md); the rest is room for a debug build on a loaded 2-core machine.
const IDLE_WITHIN: Duration = Duration::from_secs(1);

/// Programs an engine does not stop inside, as data with the reason (docs/engines.md).
/// They are not run there: each would keep a core busy for the rest of the suite.
const KNOWN_GAPS: &[(&str, &[&str], &str)] = &[(
    "v8",
    &[
        "reverse_of_a_huge_array_like",
        "copy_within_a_huge_array_like",
        "shift_of_a_huge_array_like",
        "splice_of_a_huge_array_like",
        "unshift_onto_a_huge_array_like",
        "fill_of_a_huge_array_like",
        "last_index_of_in_a_huge_array_like",
        "includes_in_a_huge_array_like",
        "sort_of_a_huge_array_like",
        "flat_of_a_huge_array_like",
        "concat_of_a_huge_array_like",
        "join_of_a_huge_array_like",
        "json_stringify_of_200000_objects_in_a_loop",
        "json_parse_of_12_mb_in_a_loop",
        "typed_array_sort_in_a_loop",
        // Stops, but about 0.8 s after the deadline on a quiet machine: too close to the bound.
        "typed_array_fill_in_a_loop",
    ],
    "V8's builtins do not look for TerminateExecution inside their loops (the outcome still \
     arrives at the deadline; the thread runs on); run hostile programs on V8 under process isolation",
)];

/// Programs an engine finishes well before the deadline (V8's sparse arrays, its
/// RegExp compiler and string search are that much faster): an answer is expected there.
const FINISH_IN_TIME: &[(&str, &[&str])] = &[(
    "v8",
    &["join_of_a_sparse_array", "a_regexp_of_100000_alternatives", "an_index_of_with_a_long_near_miss"],
)];

fn finishes_in_time(name: &str) -> bool {
    let engine = crate::support::engine().name();
    FINISH_IN_TIME.iter().any(|(on, names)| *on == engine && names.contains(&name))
}

fn known_gap(name: &str) -> Option<&'static str> {
    let engine = crate::support::engine().name();
    KNOWN_GAPS
        .iter()
        .find(|(on, names, _)| *on == engine && names.contains(&name))
        .map(|(_, _, reason)| *reason)
}

/// Runs `code` with the timeout, checks the timeout outcome, and waits for the engine to go.
async fn stops_at_the_deadline(name: &str, code: &str) {
    let executor = Executor::new(crate::support::config().workers(2));
    let started = Instant::now();
    let deadline = started + TIMEOUT;
    let outcome = executor.execute(Request::new(format!("async () => {{ {code} }}")).timeout(TIMEOUT)).await;
    if finishes_in_time(name) {
        // This engine does the work well within the deadline: an answer, on time.
        assert!(
            matches!(outcome.kind(), OutcomeKind::Returned | OutcomeKind::Thrown)
                && started.elapsed() < TIMEOUT,
            "{name} was expected to finish before the deadline on {}: {}",
            crate::support::engine().name(),
            outcome.to_json_string()
        );
    } else {
        assert_eq!(
            outcome.to_json_string(),
            r#"{"error":"Execution timed out after 300 ms.","kind":"timeout","logs":[]}"#,
            "{name}: {code}"
        );
    }
    while executor.live_engines() > 0 {
        assert!(
            Instant::now() < deadline + IDLE_WITHIN,
            "{name}: the engine was still busy {IDLE_WITHIN:?} after the deadline: {code}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The figure the issue asks for; `cargo test --test engines builtins_interrupt -- --nocapture`.
    let idle = Instant::now().saturating_duration_since(deadline);
    println!("{name}: engine idle {} ms after the deadline", idle.as_millis());
}

macro_rules! builtins_stop {
    ($($name:ident: $code:expr,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if let Some(reason) = known_gap(stringify!($name)) {
                eprintln!("{}: not run on {}: {reason}", stringify!($name), crate::support::engine().name());
                return;
            }
            stops_at_the_deadline(stringify!($name), $code).await;
        }
    )*};
}

builtins_stop! {
    // Generic array-like paths: stock QuickJS loops 2^53 times without asking.
    reverse_of_a_huge_array_like: "Array.prototype.reverse.call({ length: 2 ** 53 - 1 })",
    join_of_a_huge_array_like: "Array.prototype.join.call({ length: 2 ** 53 - 1 })",
    copy_within_a_huge_array_like: "Array.prototype.copyWithin.call({ length: 2 ** 53 - 1 }, 0, 1)",
    shift_of_a_huge_array_like: "Array.prototype.shift.call({ length: 2 ** 53 - 1 })",
    splice_of_a_huge_array_like: "Array.prototype.splice.call({ length: 2 ** 53 - 1 }, 0, 1)",
    // 2 ** 53 - 1 plus one element is refused at once ("Array loo long"), so one less.
    unshift_onto_a_huge_array_like: "Array.prototype.unshift.call({ length: 2 ** 53 - 2 }, 1)",
    // A typed array prototype takes each store without a property (an own store would
    // fill the memory limit first).
    fill_of_a_huge_array_like: "Array.prototype.fill.call({ length: 2 ** 53 - 1, __proto__: new Uint8Array(0) }, 1)",
    last_index_of_in_a_huge_array_like: "Array.prototype.lastIndexOf.call({ length: 2 ** 53 - 1 }, 1)",
    includes_in_a_huge_array_like: "Array.prototype.includes.call({ length: 2 ** 53 - 1 }, 1)",
    sort_of_a_huge_array_like: "Array.prototype.sort.call({ length: 2 ** 53 - 1 })",
    flat_of_a_huge_array_like: "Array.prototype.flat.call({ length: 2 ** 53 - 1 })",
    concat_of_a_huge_array_like: "[].concat({ length: 2 ** 53 - 2, [Symbol.isConcatSpreadable]: true })",
    join_of_a_sparse_array: "new Array(2 ** 32 - 1).join('')",
    // Each call is bounded by the memory limit, but a loop of them asked the handler once
    // in every 50 calls or so.
    typed_array_fill_in_a_loop: "const a = new Uint8Array(2 ** 24); for (;;) a.fill(1)",
    typed_array_sort_in_a_loop: "const a = new Float64Array(2 ** 20); for (let i = 0; i < a.length; i++) a[i] = (i * 7919) % 1000; for (;;) a.slice().sort()",
    json_stringify_of_200000_objects_in_a_loop: "const objects = Array.from({ length: 2e5 }, (_, i) => ({ i, s: 'x' + i })); for (;;) JSON.stringify(objects)",
    json_parse_of_12_mb_in_a_loop: "const text = '[' + '1234567,'.repeat(1.5e6) + '1]'; for (;;) JSON.parse(text)",
    string_repeat_of_16_mib_in_a_loop: "for (;;) 'x'.repeat(2 ** 24)",
    // Quadratic inside one call.
    a_regexp_of_100000_alternatives: "new RegExp(Array.from({ length: 1e5 }, (_, i) => 'a' + i).join('|'))",
    an_index_of_with_a_long_near_miss: "'a'.repeat(2 ** 18).indexOf('a'.repeat(2 ** 17) + 'b')",
    // Exponential: QuickJS's regexp engine asked already; kept as a regression check.
    a_catastrophic_regexp: "/^(a+)+$/.test('a'.repeat(50) + 'b')",
}
