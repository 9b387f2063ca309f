//! The watchdog: one thread per executor that acts at given instants whatever engines do.
//!
//! At an execution's deadline it stops the engine and hands the host the timeout outcome
//! itself, so the outcome arrives on time even while the engine is inside a long native
//! call; it also bounds a retained engine's late callbacks. It knows nothing of engines
//! or runtimes: each watch is an instant and an action. Adding a watch wakes the thread
//! only when it is due before everything already held, so a run costs no thread switch.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

type Action = Box<dyn FnOnce() + Send>;

/// A handle to the watchdog thread; cheap to clone. The thread ends with the last handle.
#[derive(Clone)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    due: Mutex<Watches>,
    wake: Condvar,
}

#[derive(Default)]
struct Watches {
    heap: BinaryHeap<Reverse<Due>>,
    order: u64,
    /// Cancelled watches are dropped whenever the heap doubles, so it holds about the live ones.
    prune_at: usize,
}

struct Due(Instant, u64, Option<Arc<AtomicBool>>, Action);

impl Due {
    fn cancelled(&self) -> bool {
        self.2.as_ref().is_some_and(|flag| flag.load(Ordering::Acquire))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(other.0, other.1))
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Watches> {
    crate::sync::lock(&shared.due)
}

impl Watchdog {
    /// Start the thread.
    pub(crate) fn spawn() -> Watchdog {
        let shared = Arc::new(Shared {
            due: Mutex::new(Watches { prune_at: 1024, ..Watches::default() }),
            wake: Condvar::new(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("codemode-watchdog".to_owned())
            .spawn(move || run(&weak))
            .unwrap_or_else(|e| panic!("could not start the watchdog thread: {e}"));
        Watchdog { shared }
    }

    /// Run `action` at `at` (at once if it has passed), unless `cancel` is raised by then.
    pub(crate) fn at(&self, at: Instant, cancel: Option<Arc<AtomicBool>>, action: Action) {
        let mut watches = lock(&self.shared);
        let earliest = watches.heap.peek().is_none_or(|Reverse(first)| at < first.0);
        watches.order += 1;
        let order = watches.order;
        watches.heap.push(Reverse(Due(at, order, cancel, action)));
        if watches.heap.len() >= watches.prune_at {
            watches.heap.retain(|Reverse(watch)| !watch.cancelled());
            watches.prune_at = (watches.heap.len() * 2).max(1024);
        }
        drop(watches);
        if earliest {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.wake.notify_all();
    }
}

fn run(shared: &Weak<Shared>) {
    loop {
        let Some(shared) = shared.upgrade() else { return };
        let mut watches = lock(&shared);
        let now = Instant::now();
        let mut ready = Vec::new();
        while watches.heap.peek().is_some_and(|Reverse(first)| first.0 <= now) {
            if let Some(Reverse(watch)) = watches.heap.pop()
                && !watch.cancelled()
            {
                ready.push(watch.3);
            }
        }
        if ready.is_empty() {
            // Sleep until the earliest watch, or a second at most, so the thread notices
            // when the executor is gone.
            let wait = watches
                .heap
                .peek()
                .map_or(std::time::Duration::from_secs(1), |Reverse(first)| {
                    first.0.saturating_duration_since(now)
                })
                .min(std::time::Duration::from_secs(1));
            drop(shared.wake.wait_timeout(watches, wait));
            continue;
        }
        drop(watches);
        drop(shared);
        for action in ready {
            action();
        }
    }
}
