//! The allocator QuickJS runs on: the C allocator, with every byte charged to the
//! execution's budget, so a refused allocation is the budget's latch and not a guess,
//! and every block kept in a list, so that an engine is freed at once when it goes.

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

/// QuickJS's allocator: C blocks charged to the [`Account`], each behind a [`Link`] so
/// that the engine can be dropped whole. QuickJS is told to leave its teardown to this
/// allocator (`JS_SetDiscardOnFree`): instead of freeing every object, atom and shape
/// one by one, it runs the finalizers that reach outside its memory and stops, and
/// this allocator's drop frees the blocks (about a hundred for a fresh engine: QuickJS
/// keeps small values in arenas of 1 to 4 KiB).
pub(super) struct Counting {
    account: Rc<Account>,
    /// The newest block still held; each links to the one before it.
    newest: *mut Link,
}

/// The header before every block: the list of blocks held, newest first. Aligned to 16
/// so that a block keeps the alignment malloc gave it, on any target.
#[repr(C, align(16))]
struct Link {
    newer: *mut Link,
    older: *mut Link,
}

const LINK: usize = std::mem::size_of::<Link>();

impl Counting {
    pub(super) fn new(account: Rc<Account>) -> Counting {
        Counting { account, newest: std::ptr::null_mut() }
    }

    /// # Safety
    /// `block` is a live block of this allocator, in no list.
    unsafe fn hold(&mut self, block: *mut Link) -> *mut u8 {
        // SAFETY: `block` and `self.newest` (when not null) are live blocks of this allocator.
        unsafe {
            (*block).newer = std::ptr::null_mut();
            (*block).older = self.newest;
            if let Some(newest) = self.newest.as_mut() {
                newest.newer = block;
            }
        }
        self.newest = block;
        // SAFETY: every block is at least `LINK` bytes longer than what was asked.
        unsafe { block.cast::<u8>().add(LINK) }
    }

    /// A new block of `total` bytes from `allocate`, charged first, held, and handed out
    /// past its link; null when the budget or the C allocator refuses.
    fn take(&mut self, total: usize, allocate: impl FnOnce(usize) -> *mut u8) -> *mut u8 {
        if !self.account.charge(total) {
            return std::ptr::null_mut();
        }
        let block = allocate(total);
        if block.is_null() {
            self.account.settle(total, 0, 0);
            return block;
        }
        self.account.settle(total, usable(block), 0);
        // SAFETY: a fresh block of `total` bytes.
        unsafe { self.hold(block.cast()) }
    }

    /// # Safety
    /// `block` is a live block of this allocator, in its list.
    unsafe fn release(&mut self, block: *mut Link) {
        // SAFETY: the list's blocks are live.
        unsafe {
            let (newer, older) = ((*block).newer, (*block).older);
            match newer.as_mut() {
                Some(newer) => newer.older = older,
                None => self.newest = older,
            }
            if let Some(older) = older.as_mut() {
                older.newer = newer;
            }
        }
    }
}

/// The block behind a pointer QuickJS holds.
fn block_of(ptr: *mut u8) -> *mut Link {
    ptr.wrapping_sub(LINK).cast()
}

impl Drop for Counting {
    /// Free what QuickJS left: everything, when its teardown was left to this allocator.
    fn drop(&mut self) {
        while !self.newest.is_null() {
            let block = self.newest;
            // SAFETY: a live block of this allocator; nothing uses the runtime's memory now
            // (this allocator goes last, after `JS_FreeRuntime`).
            unsafe {
                self.newest = (*block).older;
                self.account.freed(usable(block.cast()));
                libc::free(block.cast());
            }
        }
    }
}

fn usable(block: *mut u8) -> usize {
    // SAFETY: `block` came from this allocator's malloc/calloc/realloc and is still live.
    unsafe { libc::malloc_usable_size(block.cast()) }
}

// SAFETY: every pointer handed out is `LINK` bytes into a block of the C allocator (so
// aligned for any type, and at least `size` bytes), and goes back to it with its block;
// `usable_size` asks that same allocator and takes the link off.
unsafe impl Allocator for Counting {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        let Some(total) = size.checked_add(LINK) else { return std::ptr::null_mut() };
        // SAFETY: plain C allocation; `take` handles a null result.
        self.take(total, |total| unsafe { libc::malloc(total) }.cast())
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size).and_then(|n| n.checked_add(LINK)) else {
            return std::ptr::null_mut();
        };
        // SAFETY: plain C allocation; `take` handles a null result.
        self.take(total, |total| unsafe { libc::calloc(1, total) }.cast())
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        let block = block_of(ptr);
        // SAFETY: the caller hands back a live pointer of this allocator.
        unsafe {
            self.release(block);
            self.account.freed(usable(block.cast()));
            libc::free(block.cast());
        }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        let Some(total) = new_size.checked_add(LINK) else { return std::ptr::null_mut() };
        let block = block_of(ptr);
        let old = usable(block.cast());
        let growth = total.saturating_sub(old);
        if !self.account.charge(growth) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller hands a live pointer of this allocator. It leaves the list
        // while realloc may move it, and goes back either way (on failure it stays valid).
        unsafe {
            self.release(block);
            let moved: *mut u8 = libc::realloc(block.cast(), total).cast();
            if moved.is_null() {
                self.account.settle(growth, 0, 0);
                self.hold(block);
                return moved;
            }
            self.account.settle(growth, usable(moved), old);
            self.hold(moved.cast())
        }
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        usable(block_of(ptr).cast()) - LINK
    }
}
