//! The isolate's stack limit, through V8's own `Isolate::SetStackLimit`.
//!
//! `CreateParams::set_stack_limit` does not hold in this V8 (15.2): `Isolate::Init`
//! resets the thread's limit to `--stack-size` below the thread's stack start, so every
//! isolate would get the same ~1 MiB. `Isolate::SetStackLimit`, called once the isolate
//! is made, does hold, but the `v8` crate does not bind it; it is called here by its C++
//! name, which the crate's static library exports (a non-virtual member taking `this`
//! and one integer is called like a C function on every target the crate ships).

/// The least stack V8 is given: below about 56 KiB, compiling the runtime's own functions
/// (V8 compiles lazily, on the caller's stack) overflows before any program runs.
const LEAST_BYTES: usize = 64 << 10;

unsafe extern "C" {
    /// `void v8::Isolate::SetStackLimit(uintptr_t)`.
    #[cfg_attr(not(target_env = "msvc"), link_name = "_ZN2v87Isolate13SetStackLimitEm")]
    #[cfg_attr(target_env = "msvc", link_name = "?SetStackLimit@Isolate@v8@@QEAAX_K@Z")]
    fn isolate_set_stack_limit(isolate: v8::UnsafeRawIsolatePtr, limit: usize);
}

/// Where this thread's stack is now.
#[inline(never)]
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&raw const marker).addr()
}

/// Let JavaScript in `isolate` use `bytes` (at least [`LEAST_BYTES`]) of this thread's stack
/// below the caller's frame, until the next call; V8 keeps a pending interrupt (a stop) across it.
///
/// The thread must have that much stack below here (the pool gives an execution thread the
/// engine's stack limit plus a margin), and the isolate must run on this thread only.
pub(super) fn set_stack_limit(isolate: &mut v8::Isolate, bytes: usize) {
    let limit = stack_position().saturating_sub(bytes.max(LEAST_BYTES)).max(1);
    // SAFETY: `isolate` is a live isolate entered on this thread; V8 only records the
    // address (never dereferences it) and compares the stack pointer against it. The
    // declaration matches V8's: the isolate as `this`, then a `uintptr_t`.
    unsafe { isolate_set_stack_limit(isolate.as_raw_isolate_ptr(), limit) }
}
