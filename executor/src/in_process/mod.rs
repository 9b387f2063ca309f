//! The core: `Executor`, the in-process executor. Each execution runs on a thread of its
//! own from the pool (`pool`), under one watchdog (`watchdog`), with its calls served on
//! the caller's runtime (`host`), its stopped engines watched until they are gone
//! (`stuck`); the rules of a run are `runtime/`'s, the engines
//! `engine/`'s.

pub(crate) mod executor;
pub(crate) mod host;
pub(crate) mod pool;
pub(crate) mod stuck;
pub(crate) mod watchdog;
