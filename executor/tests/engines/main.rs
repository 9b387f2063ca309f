//! The engine suite: every behaviour of an execution, run on each engine built in.
//!
//! Tests run on the engine `support::engine()` names: QuickJS, unless the environment's
//! `CODEMODE_TEST_ENGINE` names another. `every_other_engine_passes_this_suite` runs
//! this binary again on each other engine built in, so `cargo test --features v8` covers
//! V8 too, from the one test binary that links it.

#[path = "../support/mod.rs"]
mod support;

mod approvals;
mod builtins_interrupt;
mod cells;
mod cpu_and_calls;
mod deadlines;
mod exact;
mod globals;
mod guide;
mod hostile;
mod hostile_v8;
mod isolation;
mod limits;
mod locations;
mod network;
mod outcomes;
mod scheduling;
mod watch;
mod webassembly;

/// With one engine built in there is no other to run: the test exists only with V8.
#[cfg(feature = "v8")]
#[test]
fn every_other_engine_passes_this_suite() {
    if std::env::var_os(support::ENGINE_VARIABLE).is_some() {
        return; // this is the run on another engine
    }
    let others: Vec<codemode_executor::EngineKind> =
        codemode_executor::EngineKind::BUILT_IN.iter().copied().filter(|&e| e != support::engine()).collect();
    assert!(!others.is_empty(), "a build with V8 has another engine to run");
    for engine in others {
        let me = std::env::current_exe().expect("the suite knows its own binary");
        let output = std::process::Command::new(me)
            .env(support::ENGINE_VARIABLE, engine.name())
            .args(["--skip", "every_other_engine_passes_this_suite"])
            .output()
            .expect("the suite runs again");
        let text = String::from_utf8_lossy(&output.stdout);
        eprintln!("{text}");
        assert!(output.status.success(), "the engine suite failed on {}:\n{text}", engine.name());
    }
}
