//! The runtime's built-in scripts on V8: their source made once per process, and V8's code
//! cache of each, taken when the first engine that ran it ends, so the functions V8
//! compiled lazily while the runtime called them are in it (a run costs 0.3 ms with that
//! cache, 0.8 ms with a cache of the scripts' top level only).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::sync::lock;

/// One built-in script: its source and, once a run has made it, V8's code cache.
pub(super) struct Builtin {
    pub(super) name: &'static str,
    pub(super) source: String,
    cache: Mutex<Option<Arc<Vec<u8>>>>,
}

impl Builtin {
    pub(super) fn cache(&self) -> Option<Arc<Vec<u8>>> {
        lock(&self.cache).clone()
    }

    pub(super) fn keep_cache(&self, bytes: Vec<u8>) {
        let mut cache = lock(&self.cache);
        if cache.is_none() {
            *cache = Some(Arc::new(bytes));
        }
    }

    /// A cache V8 refused (another V8 build or flags): made again on the next run.
    pub(super) fn drop_cache(&self) {
        *lock(&self.cache) = None;
    }
}

/// The built-in named `name`, its source made on first use.
pub(super) fn builtin(name: &'static str, source: fn() -> String) -> Arc<Builtin> {
    static BUILTINS: OnceLock<Mutex<HashMap<&'static str, Arc<Builtin>>>> = OnceLock::new();
    let builtins = BUILTINS.get_or_init(Mutex::default);
    let mut builtins = lock(builtins);
    builtins
        .entry(name)
        .or_insert_with(|| Arc::new(Builtin { name, source: source(), cache: Mutex::new(None) }))
        .clone()
}
