//! What V8 allocates outside its heap, charged to the execution's budget: ArrayBuffer
//! backing stores go through a counting allocator, and the near-heap-limit callback
//! latches the budget and stops the isolate before V8 would give up on the process.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::ThreadId;

use crate::budget::Budget;

/// One isolate's account: the budget once the engine has one, and how to stop the isolate.
///
/// Shared with V8 (the allocator may free from a background thread, after a GC), so
/// everything here is atomic; the budget itself is charged only on the isolate's thread.
pub(super) struct Account {
    budget: OnceLock<Arc<Budget>>,
    isolate: OnceLock<v8::IsolateHandle>,
    /// Backing-store bytes held now, counted from the isolate's first allocation.
    held: AtomicUsize,
    /// Bytes freed on another thread, refunded on the isolate's thread at its next turn.
    freed_elsewhere: AtomicUsize,
    owner: ThreadId,
}

impl Account {
    pub(super) fn new() -> Arc<Account> {
        Arc::new(Account {
            budget: OnceLock::new(),
            isolate: OnceLock::new(),
            held: AtomicUsize::new(0),
            freed_elsewhere: AtomicUsize::new(0),
            owner: std::thread::current().id(),
        })
    }

    pub(super) fn set_isolate(&self, handle: v8::IsolateHandle) {
        let _ = self.isolate.set(handle);
    }

    /// Charge the execution's budget from now on, starting with what the blank isolate holds.
    pub(super) fn attach(&self, budget: Arc<Budget>) {
        budget.charge_spent(self.held.load(Ordering::Acquire));
        let _ = self.budget.set(budget);
    }

    pub(super) fn exceeded(&self) -> bool {
        self.budget.get().is_some_and(|budget| budget.exceeded())
    }

    /// Latch the budget as exceeded and stop whatever runs in the isolate.
    pub(super) fn exceed(&self) {
        if let Some(budget) = self.budget.get() {
            budget.charge(usize::MAX);
        }
        if let Some(isolate) = self.isolate.get() {
            isolate.terminate_execution();
        }
    }

    /// Refund what other threads freed since; only on the isolate's thread, which alone charges.
    pub(super) fn settle(&self) {
        if std::thread::current().id() != self.owner {
            return;
        }
        let freed = self.freed_elsewhere.swap(0, Ordering::AcqRel);
        if freed > 0
            && let Some(budget) = self.budget.get()
        {
            budget.refund(freed);
        }
    }

    /// Room for `bytes` more; `false` (the budget latched, the isolate stopping) when there is none.
    pub(super) fn charge(&self, bytes: usize) -> bool {
        self.settle();
        if let Some(budget) = self.budget.get()
            && !budget.charge(bytes)
        {
            self.exceed();
            return false;
        }
        self.held.fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Give back `bytes` charged before.
    pub(super) fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes.min(self.held.load(Ordering::Acquire)), Ordering::AcqRel);
        if std::thread::current().id() == self.owner {
            if let Some(budget) = self.budget.get() {
                budget.refund(bytes);
            }
        } else {
            self.freed_elsewhere.fetch_add(bytes, Ordering::AcqRel);
        }
    }
}

/// The allocator V8 makes backing stores with, over `account`.
pub(super) fn allocator(account: &Arc<Account>) -> v8::UniqueRef<v8::Allocator> {
    let handle = Arc::into_raw(account.clone());
    // SAFETY: `handle` is a live `Arc<Account>` whose count the allocator now owns; the
    // vtable's functions read it as `&Account` and `drop_account` releases it once.
    unsafe { v8::new_rust_allocator(handle, &VTABLE) }
}

static VTABLE: v8::RustAllocatorVtable<Account> =
    v8::RustAllocatorVtable { allocate, allocate_uninitialized, free, drop: drop_account };

unsafe extern "C" fn allocate(account: &Account, len: usize) -> *mut c_void {
    if !account.charge(len) {
        return std::ptr::null_mut();
    }
    // SAFETY: plain C allocation of at least one byte; a null result is refunded below.
    let ptr = unsafe { libc::calloc(len.max(1), 1) };
    if ptr.is_null() {
        account.release(len);
    }
    ptr
}

unsafe extern "C" fn allocate_uninitialized(account: &Account, len: usize) -> *mut c_void {
    if !account.charge(len) {
        return std::ptr::null_mut();
    }
    // SAFETY: plain C allocation of at least one byte; a null result is refunded below.
    let ptr = unsafe { libc::malloc(len.max(1)) };
    if ptr.is_null() {
        account.release(len);
    }
    ptr
}

unsafe extern "C" fn free(account: &Account, data: *mut c_void, len: usize) {
    if data.is_null() {
        return;
    }
    // SAFETY: V8 hands back a block this allocator returned, with the length it asked for.
    unsafe { libc::free(data) };
    account.release(len);
}

unsafe extern "C" fn drop_account(account: *const Account) {
    // SAFETY: the pointer is the `Arc::into_raw` made in `allocator`, released here once.
    drop(unsafe { Arc::from_raw(account) });
}

/// V8 is about to reach the heap limit: the run is out of memory. The isolate stops, and
/// V8 gets room to unwind (a refused limit would end the whole process).
pub(super) unsafe extern "C" fn near_heap_limit(data: *mut c_void, current: usize, _initial: usize) -> usize {
    // SAFETY: `data` is the `Arc<Account>` the engine keeps alive until after its isolate.
    let account = unsafe { &*data.cast::<Account>() };
    account.exceed();
    current.saturating_mul(2).max(current.saturating_add(256 << 20))
}

/// V8 could not get memory from the operating system (a worker's cap, or the machine's
/// end) and cannot go on: the process ends with the status that tells a process-isolation
/// host it was memory ([`codemode_protocol::wire::WORKER_OUT_OF_MEMORY_EXIT`]). V8 would
/// end it anyway, with a status no host could tell from a crash.
pub(super) unsafe extern "C" fn out_of_memory(_location: *const std::ffi::c_char, _details: &v8::OomDetails) {
    // SAFETY: `_exit` ends the process at once, running nothing that could allocate.
    unsafe { libc::_exit(codemode_protocol::wire::WORKER_OUT_OF_MEMORY_EXIT) }
}

unsafe extern "C" {
    /// `std::set_new_handler` of the C++ runtime the V8 library carries (libc++abi): the
    /// function C++'s `operator new` calls when it gets no memory, instead of aborting.
    #[link_name = "_ZSt15set_new_handlerPFvvE"]
    fn set_new_handler(handler: Option<unsafe extern "C" fn()>) -> Option<unsafe extern "C" fn()>;
}

/// Make C++'s allocation failures (V8's own containers, ICU) end the process as V8's do,
/// with [`codemode_protocol::wire::WORKER_OUT_OF_MEMORY_EXIT`], rather than with a silent
/// abort no host could tell from a crash. Called once, with the platform.
pub(super) fn exit_when_cpp_runs_out() {
    // SAFETY: swaps a process-wide function pointer; the handler is a plain function that
    // lives for the process and only calls `_exit`.
    unsafe {
        set_new_handler(Some(cpp_out_of_memory));
    }
}

unsafe extern "C" fn cpp_out_of_memory() {
    // SAFETY: `_exit` ends the process at once, running nothing that could allocate.
    unsafe { libc::_exit(codemode_protocol::wire::WORKER_OUT_OF_MEMORY_EXIT) }
}
