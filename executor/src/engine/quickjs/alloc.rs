//! The allocator QuickJS runs on: the C allocator, with every byte charged to the
//! execution's budget, so a refused allocation is the budget's latch and not a guess.

use std::cell::{Cell, OnceCell};
use std::rc::Rc;
use std::sync::Arc;

use rquickjs::allocator::Allocator;

use crate::budget::Budget;

/// Where an engine's allocations are charged: nowhere while it is blank, then its execution's budget.
#[derive(Default)]
pub(super) struct Account {
    budget: OnceCell<Arc<Budget>>,
    /// Bytes held now, counted from the first allocation.
    used: Cell<usize>,
}

impl Account {
    /// Charge the execution's budget from now on, starting with what the blank engine holds.
    pub(super) fn attach(&self, budget: Arc<Budget>) {
        budget.charge_spent(self.used.get());
        let _ = self.budget.set(budget);
    }

    pub(super) fn exceeded(&self) -> bool {
        self.budget.get().is_some_and(|budget| budget.exceeded())
    }

    fn charge(&self, bytes: usize) -> bool {
        self.budget.get().is_none_or(|budget| budget.charge(bytes))
    }

    /// `charged` bytes went to the budget for a block that really takes `real` (and
    /// replaced one of `replaced`, if any). One atomic step at most: this runs on every
    /// allocation and free of the engine.
    fn settle(&self, charged: usize, real: usize, replaced: usize) {
        if let Some(budget) = self.budget.get() {
            let back = charged + replaced;
            if real > back {
                budget.charge_spent(real - back);
            } else if back > real {
                budget.refund(back - real);
            }
        }
        self.used.set((self.used.get() + real).saturating_sub(replaced));
    }

    fn freed(&self, usable: usize) {
        self.settle(0, 0, usable);
    }
}

pub(super) struct Counting(pub(super) Rc<Account>);

fn usable(ptr: *mut u8) -> usize {
    // SAFETY: `ptr` came from this allocator's malloc/calloc/realloc and is still live.
    unsafe { libc::malloc_usable_size(ptr.cast()) }
}

// SAFETY: every pointer handed out comes from the C allocator (aligned for any type, at
// least `size` bytes) and is returned to it; `usable_size` asks that same allocator.
unsafe impl Allocator for Counting {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.0.charge(size) {
            return std::ptr::null_mut();
        }
        // SAFETY: plain C allocation; a null result is handled below.
        let ptr: *mut u8 = unsafe { libc::malloc(size) }.cast();
        let real = if ptr.is_null() { 0 } else { usable(ptr) };
        self.0.settle(size, real, 0);
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else { return std::ptr::null_mut() };
        if !self.0.charge(total) {
            return std::ptr::null_mut();
        }
        // SAFETY: plain C allocation; a null result is handled below.
        let ptr: *mut u8 = unsafe { libc::calloc(count, size) }.cast();
        let real = if ptr.is_null() { 0 } else { usable(ptr) };
        self.0.settle(total, real, 0);
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        self.0.freed(usable(ptr));
        // SAFETY: the caller hands back a live pointer of this allocator.
        unsafe { libc::free(ptr.cast()) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        let old = usable(ptr);
        let growth = new_size.saturating_sub(old);
        if !self.0.charge(growth) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller hands a live pointer of this allocator; on failure it stays valid.
        let moved: *mut u8 = unsafe { libc::realloc(ptr.cast(), new_size) }.cast();
        if moved.is_null() {
            self.0.settle(growth, 0, 0);
            return moved;
        }
        self.0.settle(growth, usable(moved), old);
        moved
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        usable(ptr)
    }
}
