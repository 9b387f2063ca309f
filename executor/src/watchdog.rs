//! The watchdog: one thread per executor that acts at given instants whatever engines do.
//!
//! At an execution's deadline it stops the engine and hands the host the timeout outcome
//! itself, so the outcome arrives on time even while the engine is inside a long native
//! call; it also bounds a retained engine's late callbacks. It knows nothing of engines
//! or runtimes: each watch is an instant and an action.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

type Action = Box<dyn FnOnce() + Send>;

/// A handle to the watchdog thread; cheap to clone.
#[derive(Clone)]
pub(crate) struct Watchdog {
    watches: Sender<Watch>,
}

/// An instant, an action, and a flag that cancels it once raised.
type Watch = (Instant, Option<Arc<AtomicBool>>, Action);

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

impl Watchdog {
    /// Start the thread; it ends when every handle is gone.
    pub(crate) fn spawn() -> Watchdog {
        let (watches, incoming) = crossbeam_channel::unbounded();
        std::thread::Builder::new()
            .name("codemode-watchdog".to_owned())
            .spawn(move || run(&incoming))
            .unwrap_or_else(|e| panic!("could not start the watchdog thread: {e}"));
        Watchdog { watches }
    }

    /// Run `action` at `at` (at once if it has passed), unless `cancel` is raised by then.
    pub(crate) fn at(&self, at: Instant, cancel: Option<Arc<AtomicBool>>, action: Action) {
        let _ = self.watches.send((at, cancel, action));
    }
}

fn run(incoming: &Receiver<Watch>) {
    let mut due: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut order = 0u64;
    // Cancelled watches are dropped whenever the heap doubles, so it holds about the live ones.
    let mut prune_at = 1024;
    loop {
        let received = match due.peek() {
            Some(Reverse(Due(at, _, _, _))) => match incoming.recv_deadline(*at) {
                Ok(watch) => Some(watch),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            },
            None => match incoming.recv() {
                Ok(watch) => Some(watch),
                Err(_) => return,
            },
        };
        if let Some((at, cancel, action)) = received {
            order += 1;
            due.push(Reverse(Due(at, order, cancel, action)));
        }
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse(Due(at, _, _, _))| *at <= now) {
            if let Some(Reverse(watch)) = due.pop() {
                if !watch.cancelled() {
                    (watch.3)();
                }
            }
        }
        if due.len() >= prune_at {
            due.retain(|Reverse(watch)| !watch.cancelled());
            prune_at = (due.len() * 2).max(1024);
        }
    }
}
