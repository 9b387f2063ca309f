//! The allocator QuickJS runs on: the C allocator, with every byte charged to the
//! execution's budget, so a refused allocation is the budget's latch and not a guess,
//! and every block kept in a list, so that an engine is freed at once when it goes, or
//! put back as it was sealed (its blocks' bytes copied back) for the next execution.

use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::sync::Arc;

use rquickjs::allocator::Allocator;

use crate::budget::Budget;

/// Where an engine's allocations are charged: nowhere while it is blank, then its
/// execution's budget; nowhere again once it is renewed for the next.
#[derive(Default)]
pub(super) struct Account {
    budget: RefCell<Option<Arc<Budget>>>,
    /// Bytes held now, counted from the first allocation.
    used: Cell<usize>,
}

impl Account {
    /// Charge the execution's budget from now on, starting with what the blank engine holds.
    pub(super) fn attach(&self, budget: Arc<Budget>) {
        budget.charge_spent(self.used.get());
        *self.budget.borrow_mut() = Some(budget);
    }

    pub(super) fn exceeded(&self) -> bool {
        self.budget.borrow().as_ref().is_some_and(|budget| budget.exceeded())
    }

    fn charge(&self, bytes: usize) -> bool {
        self.budget.borrow().as_ref().is_none_or(|budget| budget.charge(bytes))
    }

    /// `charged` bytes went to the budget for a block that really takes `real` (and
    /// replaced one of `replaced`, if any). One atomic step at most: this runs on every
    /// allocation and free of the engine.
    fn settle(&self, charged: usize, real: usize, replaced: usize) {
        if let Some(budget) = self.budget.borrow().as_ref() {
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

/// An engine's heap as its allocator holds it: the blocks handed out, each behind a
/// [`Link`], and the seal, if any.
///
/// Sealing remembers every block held and copies their bytes. From then on QuickJS's
/// frees of those blocks are only marked (the blocks stay where they are, and charged),
/// and what it allocates is new blocks in the list. Renewing frees the new blocks and copies the
/// sealed bytes back: every sealed block is where it was and as it was, so the engine is
/// byte for byte the one that was sealed, and every pointer in it is as valid as it was.
#[derive(Default)]
pub(super) struct Heap {
    pub(super) account: Account,
    /// The newest block held outside the seal; each links to the one before it.
    newest: Cell<*mut Link>,
    seal: RefCell<Option<Seal>>,
}

/// The blocks held when the heap was sealed, and a copy of each, headers included (as
/// bytes that may be uninitialized: a block's unused tail is copied as it is).
struct Seal {
    blocks: Vec<(*mut Link, usize)>,
    bytes: Box<[MaybeUninit<u8>]>,
    /// What the account counted held at the seal.
    used: usize,
}

/// The header before every block: the list of blocks held, newest first. Aligned to 16
/// so that a block keeps the alignment malloc gave it, on any target. A sealed block is
/// in no list: its `newer` is [`SEALED`], and its `older` is [`LET_GO`] once QuickJS
/// freed it.
#[repr(C, align(16))]
struct Link {
    newer: *mut Link,
    older: *mut Link,
}

const LINK: usize = std::mem::size_of::<Link>();
const SEALED: *mut Link = std::ptr::without_provenance_mut(usize::MAX);
const LET_GO: *mut Link = std::ptr::without_provenance_mut(1);

impl Heap {
    /// Remember the heap as it is now. Nothing outside it may point into the blocks
    /// handed out later, and anything outside it the sealed blocks point to must outlive
    /// every renewal (QuickJS's own heap is the first; the engine sees to the second).
    pub(super) fn seal(&self) {
        let mut seal = self.seal.borrow_mut();
        if seal.is_some() {
            return;
        }
        let (mut blocks, mut total) = (Vec::new(), 0);
        let mut block = self.newest.replace(std::ptr::null_mut());
        while !block.is_null() {
            // SAFETY: the list's blocks are live blocks of this heap.
            unsafe {
                let older = (*block).older;
                ((*block).newer, (*block).older) = (SEALED, std::ptr::null_mut());
                let size = usable(block.cast());
                blocks.push((block, size));
                total += size;
                block = older;
            }
        }
        let mut bytes = Box::new_uninit_slice(total);
        let mut to = 0;
        for &(block, size) in &blocks {
            // SAFETY: a live block of `size` usable bytes, and room for them at `to`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    block.cast::<MaybeUninit<u8>>(),
                    bytes.as_mut_ptr().add(to),
                    size,
                )
            };
            to += size;
        }
        *seal = Some(Seal { blocks, bytes, used: self.account.used.get() });
    }

    /// Put the heap back as it was sealed; false when it was not sealed. Nothing may hold
    /// a value made since, and QuickJS must not be running.
    pub(super) fn renew(&self) -> bool {
        let seal = self.seal.borrow();
        let Some(seal) = seal.as_ref() else { return false };
        *self.account.budget.borrow_mut() = None;
        self.free_list();
        let mut from = 0;
        for &(block, size) in &seal.blocks {
            // SAFETY: a sealed block is never given back to the C allocator while sealed,
            // and its copy is `size` bytes at `from`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    seal.bytes.as_ptr().add(from),
                    block.cast::<MaybeUninit<u8>>(),
                    size,
                )
            };
            from += size;
        }
        self.account.used.set(seal.used);
        true
    }

    /// Give up the seal: the copy is freed, the sealed blocks QuickJS freed since go back
    /// to the C allocator (counted freed only now: they were held until now), and the
    /// rest are held as any other.
    pub(super) fn unseal(&self) {
        let Some(seal) = self.seal.borrow_mut().take() else { return };
        for (block, size) in seal.blocks {
            // SAFETY: a sealed block of this heap, live in the C allocator.
            unsafe {
                if (*block).older == LET_GO {
                    self.account.freed(size);
                    libc::free(block.cast());
                } else {
                    self.hold(block);
                }
            }
        }
    }

    /// # Safety
    /// `block` is a live block of this heap, in no list.
    unsafe fn hold(&self, block: *mut Link) -> *mut u8 {
        let newest = self.newest.get();
        // SAFETY: `block` and `newest` (when not null) are live blocks of this heap.
        unsafe {
            (*block).newer = std::ptr::null_mut();
            (*block).older = newest;
            if let Some(newest) = newest.as_mut() {
                newest.newer = block;
            }
        }
        self.newest.set(block);
        // SAFETY: every block is at least `LINK` bytes longer than what was asked.
        unsafe { block.cast::<u8>().add(LINK) }
    }

    /// # Safety
    /// `block` is a live block of this heap, in its list.
    unsafe fn release(&self, block: *mut Link) {
        // SAFETY: the list's blocks are live.
        unsafe {
            let (newer, older) = ((*block).newer, (*block).older);
            match newer.as_mut() {
                Some(newer) => newer.older = older,
                None => self.newest.set(older),
            }
            if let Some(older) = older.as_mut() {
                older.newer = newer;
            }
        }
    }

    /// Give every block of the list back to the C allocator, uncounted (the caller sets the count).
    fn free_list(&self) -> usize {
        let mut freed = 0;
        let mut block = self.newest.replace(std::ptr::null_mut());
        while !block.is_null() {
            // SAFETY: a live block of this heap; nothing uses it any more.
            unsafe {
                let older = (*block).older;
                freed += usable(block.cast());
                libc::free(block.cast());
                block = older;
            }
        }
        freed
    }
}

/// QuickJS's allocator: C blocks charged to the [`Account`], each held by the [`Heap`]
/// so that the engine can be dropped whole or renewed. QuickJS is told to leave its
/// teardown to this allocator (`JS_SetDiscardOnFree`): instead of freeing every object,
/// atom and shape one by one, it runs the finalizers that reach outside its memory and
/// stops, and this allocator's drop frees the blocks (about a hundred for a fresh engine:
/// QuickJS keeps small values in arenas of 1 to 4 KiB).
pub(super) struct Counting {
    heap: Rc<Heap>,
}

impl Counting {
    pub(super) fn new(heap: Rc<Heap>) -> Counting {
        Counting { heap }
    }

    /// A new block of `total` bytes from `allocate`, charged first, held, and handed out
    /// past its link; null when the budget or the C allocator refuses.
    fn take(&mut self, total: usize, allocate: impl FnOnce(usize) -> *mut u8) -> *mut u8 {
        let account = &self.heap.account;
        if !account.charge(total) {
            return std::ptr::null_mut();
        }
        let block = allocate(total);
        if block.is_null() {
            account.settle(total, 0, 0);
            return block;
        }
        account.settle(total, usable(block), 0);
        // SAFETY: a fresh block of `total` bytes.
        unsafe { self.heap.hold(block.cast()) }
    }
}

/// The block behind a pointer QuickJS holds.
fn block_of(ptr: *mut u8) -> *mut Link {
    ptr.wrapping_sub(LINK).cast()
}

impl Drop for Counting {
    /// Free what QuickJS left: everything, when its teardown was left to this allocator.
    fn drop(&mut self) {
        // Nothing uses the runtime's memory now: this allocator goes last, after `JS_FreeRuntime`.
        self.heap.unseal();
        let freed = self.heap.free_list();
        self.heap.account.freed(freed);
    }
}

fn usable(block: *mut u8) -> usize {
    // SAFETY: `block` came from this allocator's malloc/calloc/realloc and is still live.
    unsafe { libc::malloc_usable_size(block.cast()) }
}

// SAFETY: every pointer handed out is `LINK` bytes into a block of the C allocator (so
// aligned for any type, and at least `size` bytes), and goes back to it with its block
// (a sealed block when the seal is given up); `usable_size` asks that same allocator and
// takes the link off.
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
        // SAFETY: the caller hands back a live pointer of this allocator. A sealed block
        // stays where it is, and is still charged, until the renewal or the unseal.
        unsafe {
            if (*block).newer == SEALED {
                (*block).older = LET_GO;
                return;
            }
            self.heap.release(block);
            self.heap.account.freed(usable(block.cast()));
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
        // SAFETY: the caller hands a live pointer of this allocator.
        if unsafe { (*block).newer } == SEALED {
            // A sealed block cannot move or grow: its bytes go to a new block, and it is let go
            // (still charged: it stays where it is until the renewal or the unseal).
            let moved = self.alloc(new_size);
            if !moved.is_null() {
                // SAFETY: both are live; the new block holds `new_size` bytes, the old `old - LINK`.
                unsafe {
                    std::ptr::copy_nonoverlapping(ptr, moved, new_size.min(old - LINK));
                    self.dealloc(ptr);
                }
            }
            return moved;
        }
        let account = &self.heap.account;
        let growth = total.saturating_sub(old);
        if !account.charge(growth) {
            return std::ptr::null_mut();
        }
        // SAFETY: a live block in the list. It leaves the list while realloc may move it,
        // and goes back either way (on failure it stays valid).
        unsafe {
            self.heap.release(block);
            let moved: *mut u8 = libc::realloc(block.cast(), total).cast();
            if moved.is_null() {
                account.settle(growth, 0, 0);
                self.heap.hold(block);
                return moved;
            }
            account.settle(growth, usable(moved), old);
            self.heap.hold(moved.cast())
        }
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        usable(block_of(ptr).cast()) - LINK
    }
}
