//! One execution's memory budget: the engine's heap and everything the host holds for it.
//!
//! The engine's allocator charges each allocation here and the runtime charges what it
//! keeps for the program (calls in flight with their payloads, timers, pending
//! rejections, log lines, the outcome). A charge that would pass the limit is refused
//! and latches the budget as exceeded: the run then ends with the memory outcome, and a
//! program cannot catch its way past it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Told once, on the thread of the charge refused, when the budget latches.
pub(crate) type OnExceeded = Box<dyn FnOnce() + Send>;

pub(crate) struct Budget {
    limit: usize,
    used: AtomicUsize,
    exceeded: AtomicBool,
    on_exceeded: Mutex<Option<OnExceeded>>,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("limit", &self.limit)
            .field("used", &self.used)
            .field("exceeded", &self.exceeded)
            .finish_non_exhaustive()
    }
}

impl Budget {
    #[cfg(test)]
    pub(crate) fn new(limit: usize) -> Budget {
        Budget::watched(limit, None)
    }

    /// A budget that calls `on_exceeded` when it latches (the memory stop's watch).
    pub(crate) fn watched(limit: usize, on_exceeded: Option<OnExceeded>) -> Budget {
        Budget {
            limit,
            used: AtomicUsize::new(0),
            exceeded: AtomicBool::new(false),
            on_exceeded: Mutex::new(on_exceeded),
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Charge `bytes`; `false` (and the budget latched as exceeded) when that passes the limit.
    pub(crate) fn charge(&self, bytes: usize) -> bool {
        let charged = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(bytes).filter(|&total| total <= self.limit)
        });
        if charged.is_err() && !self.exceeded.swap(true, Ordering::AcqRel) {
            let told = crate::sync::lock(&self.on_exceeded).take();
            if let Some(tell) = told {
                tell();
            }
        }
        charged.is_ok()
    }

    /// Charge `bytes` that are already spent (an allocator's rounding up), never refusing.
    pub(crate) fn charge_spent(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Give back `bytes`; an engine may free from a thread of its own (V8's sweeper).
    pub(crate) fn refund(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(bytes)));
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::Budget;

    #[test]
    fn a_refused_charge_latches_and_spends_nothing() {
        let budget = Budget::new(100);
        assert!(budget.charge(60));
        assert!(!budget.charge(41));
        assert_eq!(budget.used(), 60);
        assert!(budget.exceeded());
        budget.refund(60);
        assert!(budget.charge(100), "room again, but the latch stays");
        assert!(budget.exceeded());
    }

    #[test]
    fn the_latch_is_told_once() {
        let told = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = told.clone();
        let tell = Box::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let budget = Budget::watched(10, Some(tell));
        assert!(budget.charge(10));
        assert_eq!(told.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert!(!budget.charge(1));
        assert!(!budget.charge(usize::MAX));
        assert_eq!(told.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
