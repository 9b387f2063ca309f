//! `lock`: a mutex taken even after a thread panicked while holding it, written once.
//!
//! Every mutex of this crate guards data that a panic cannot leave half-written (each
//! critical section is one insert, take, swap or push), and a panic elsewhere (a host's
//! dispatch, say) must never become a panic of the host's own later calls: so poisoning
//! is ignored, here.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex` locked, poisoned or not.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
