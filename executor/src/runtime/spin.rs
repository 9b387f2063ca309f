//! Waiting for a call's answer awake, briefly, while a CPU is free to do it.
//!
//! An answer that reaches a sleeping execution thread costs a wake-up, and when that
//! thread's CPU has gone idle, an interrupt into a halted CPU: about 20 µs on a VM
//! (docs/performance.md, "An execution waits awake for its answer"). So a thread with calls
//! in flight first polls its inbox for up to its `answer_spin`, offering its CPU at each
//! turn to any thread runnable on it. At most one thread fewer than the CPUs the process may
//! use polls at once, so polling never holds the last one, and with one CPU nothing polls.
//! The bound is this process's: each worker process of process isolation has its own.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

/// The longest `answer_spin` used: past this an answer is slow enough that a wake-up is
/// a small part of it, and the polling would only burn CPU.
pub(crate) const MAX_ANSWER_SPIN: Duration = Duration::from_millis(1);

/// How many threads may poll at once.
pub(crate) struct Gate {
    polling: AtomicUsize,
    max: usize,
}

/// The right to poll, given back when dropped.
pub(crate) struct Slot<'a>(&'a Gate);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.polling.fetch_sub(1, Ordering::Release);
    }
}

impl Gate {
    pub(crate) const fn new(max: usize) -> Gate {
        Gate { polling: AtomicUsize::new(0), max }
    }

    /// The process's gate: the CPUs it may use ([`super::cpus::cpus`]) less one.
    pub(crate) fn process() -> &'static Gate {
        static GATE: OnceLock<Gate> = OnceLock::new();
        GATE.get_or_init(|| Gate::new(super::cpus::cpus() - 1))
    }

    pub(crate) fn take(&self) -> Option<Slot<'_>> {
        self.polling
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |n| (n < self.max).then_some(n + 1))
            .ok()
            .map(|_| Slot(self))
    }
}

/// What polling found.
pub(crate) enum Polled<T> {
    Message(T),
    /// The sending side is gone: the host dropped the execution.
    Disconnected,
    /// Nothing came before `until`, or no slot was free: wait asleep.
    Nothing,
}

/// Poll `inbox` until `until`, if `gate` has a slot; `read` first at each turn, when the
/// thread may read its answers from its connection itself (`wire::lend`).
pub(crate) fn poll<T>(
    inbox: &Receiver<T>,
    until: Instant,
    gate: &Gate,
    read: Option<&dyn Fn()>,
) -> Polled<T> {
    let Some(_slot) = gate.take() else { return Polled::Nothing };
    loop {
        if let Some(read) = read {
            read();
        }
        match inbox.try_recv() {
            Ok(message) => return Polled::Message(message),
            Err(TryRecvError::Disconnected) => return Polled::Disconnected,
            Err(TryRecvError::Empty) => {}
        }
        if Instant::now() >= until {
            return Polled::Nothing;
        }
        // Offers this CPU to any thread runnable on it.
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::{Gate, Polled, poll};
    use std::time::{Duration, Instant};

    #[test]
    fn the_gate_admits_its_number_and_each_slot_given_back() {
        let gate = Gate::new(2);
        let first = gate.take().expect("a first slot");
        let second = gate.take().expect("a second slot");
        assert!(gate.take().is_none(), "a third poller past a gate of two");
        drop(first);
        let third = gate.take().expect("the slot given back");
        assert!(gate.take().is_none());
        drop((second, third));
        assert!(Gate::new(0).take().is_none(), "with one CPU nothing polls");
    }

    #[test]
    fn polling_takes_a_waiting_message_and_sees_the_sender_gone() {
        let gate = Gate::new(1);
        let (send, inbox) = crossbeam_channel::unbounded();
        send.send(7).unwrap();
        let later = Instant::now() + Duration::from_secs(60);
        assert!(matches!(poll(&inbox, later, &gate, None), Polled::Message(7)));
        drop(send);
        assert!(matches!(poll(&inbox, later, &gate, None), Polled::Disconnected));
        // The slot went back each time.
        assert!(gate.take().is_some());
    }

    #[test]
    fn polling_ends_at_its_time_and_without_a_slot_at_once() {
        let (send, inbox) = crossbeam_channel::unbounded::<u8>();
        let gate = Gate::new(1);
        assert!(matches!(poll(&inbox, Instant::now(), &gate, None), Polled::Nothing));
        let held = gate.take().unwrap();
        // No slot: it returns without polling, though a message waits and time is left.
        send.send(1).unwrap();
        let later = Instant::now() + Duration::from_secs(60);
        assert!(matches!(poll(&inbox, later, &gate, None), Polled::Nothing));
        drop(held);
        assert!(matches!(poll(&inbox, later, &gate, None), Polled::Message(1)));
    }

    #[test]
    fn an_answer_sent_while_polling_is_taken() {
        let (send, inbox) = crossbeam_channel::unbounded();
        let gate = Gate::new(1);
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            send.send("answer").unwrap();
            // Held until the poller has it, so a miss reads as Nothing, not Disconnected.
            std::thread::sleep(Duration::from_secs(5));
        });
        let until = Instant::now() + Duration::from_secs(4);
        assert!(matches!(poll(&inbox, until, &gate, None), Polled::Message("answer")));
        drop(sender);
    }
}
