//! The timer schedule: when each timer is due. Callbacks and their arguments stay in the
//! engine (the prelude holds them); the runtime only says which id fires when.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct Timers {
    next_id: u64,
    due: BTreeMap<(Instant, u64), ()>,
    entries: HashMap<u64, Entry>,
    /// The timer whose callback runs now, and whether the callback cleared it.
    firing: Option<(u64, bool)>,
}

struct Entry {
    due: Instant,
    interval: Option<Duration>,
}

impl Timers {
    pub(super) fn add(&mut self, delay: Duration, repeat: bool) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let due = Instant::now() + delay;
        self.due.insert((due, id), ());
        self.entries.insert(id, Entry { due, interval: repeat.then_some(delay) });
        id
    }

    /// `true` when a live timer went.
    pub(super) fn clear(&mut self, id: u64) -> bool {
        if let Some((firing, cleared)) = &mut self.firing
            && *firing == id
        {
            *cleared = true;
        }
        match self.entries.remove(&id) {
            Some(entry) => {
                self.due.remove(&(entry.due, id));
                true
            }
            None => false,
        }
    }

    /// Timers pending (an interval counts until cleared).
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.first_key_value().map(|(&(at, _), _)| at)
    }

    /// The first timer due by `now`, now firing.
    pub(super) fn take_due(&mut self, now: Instant) -> Option<u64> {
        let (&(at, id), _) = self.due.first_key_value()?;
        if at > now {
            return None;
        }
        self.due.remove(&(at, id));
        self.firing = Some((id, false));
        Some(id)
    }

    /// After a callback: an interval it did not clear is due again; anything else goes.
    /// `true` when the timer went.
    pub(super) fn rearm(&mut self, id: u64) -> bool {
        let cleared = matches!(self.firing.take(), Some((firing, true)) if firing == id);
        let interval = self.entries.get(&id).and_then(|entry| entry.interval);
        match interval {
            Some(interval) if !cleared => {
                let due = Instant::now() + interval;
                self.due.insert((due, id), ());
                if let Some(entry) = self.entries.get_mut(&id) {
                    entry.due = due;
                }
                false
            }
            _ => self.entries.remove(&id).is_some(),
        }
    }
}
