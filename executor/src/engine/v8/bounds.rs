//! What V8 allocates outside both its heap limit and the ArrayBuffer allocator, charged to
//! the execution's budget before it is made (`bounds.js`, installed in every new context).
//!
//! - **Resizable and growable buffers** (`maxByteLength`): V8 reserves the maximum and
//!   commits pages as the buffer grows, without the allocator. The maximum is charged when
//!   the buffer is made, since growth itself has no hook.
//! - **Intl objects** hold ICU's objects, which V8 does not report: each is charged
//!   [`INTL_OBJECT_BYTES`], above the largest measured (a `DateTimeFormat` with a time
//!   zone, about 40 KiB; docs/engines.md). A `toLocaleString` or `localeCompare` makes
//!   one and drops it: garbage, not charged, but the heap's collector does not see it
//!   either (20,000 such calls held 190 MiB), so every [`ICU_GARBAGE_BYTES`] of it
//!   (counted at [`ICU_CALL_BYTES`] a call) the heap is collected.
//! - **WebAssembly**, absent unless a run asks for it ([`Bounds::enable_web_assembly`]):
//!   a module's bytes are charged [`bounds.js`'s `CODE_PER_BYTE`] times over for the code
//!   compiled from them, and every memory gets a maximum (its initial size when it
//!   declares none), charged whole per instance: wasm's `memory.grow` runs without
//!   returning to the host, so it can only be bounded ahead.
//!
//! - **Arrays a builtin makes whole** (`sort`, `toSorted`, `Array.from` of an array-like
//!   of length 2²⁸): V8 copies into an array of the length at once, outside any interrupt
//!   check, past the heap limit in one step or, past its largest array, ending the process.
//!   The copy is charged for the call and given back after it.
//!
//! A charge the budget has no room for latches it and stops the isolate: the run ends with
//! the memory outcome, as for any allocation.

use super::{Shared, convert};
use std::rc::Rc;

/// What each Intl object is charged.
const INTL_OBJECT_BYTES: f64 = (64 << 10) as f64;

/// What a call that makes and drops an ICU object counts towards a collection: above the
/// 9.5 KiB measured for the largest (a date with a time zone and a full style).
const ICU_CALL_BYTES: f64 = (16 << 10) as f64;

/// ICU garbage made since the last collection that starts another.
const ICU_GARBAGE_BYTES: usize = 8 << 20;

/// The installed bounds: the `WebAssembly` namespace taken off the global, and the
/// function that puts it back, bounded.
pub(super) struct Bounds {
    original: v8::Global<v8::Value>,
    enable: v8::Global<v8::Function>,
}

impl Bounds {
    /// The source of `bounds.js`, a function of the natives below that installs the
    /// bounds; evaluated as a built-in script (compiled once per process, with V8's cache).
    pub(super) fn source() -> String {
        include_str!("bounds.js").to_owned()
    }

    /// Install the bounds in `scope`'s context with `installer` (the value of
    /// [`Bounds::source`]), and take `WebAssembly` off its global.
    pub(super) fn install(
        scope: &mut v8::PinScope<'_, '_>,
        installer: &v8::Global<v8::Value>,
    ) -> Option<Bounds> {
        let context = scope.get_current_context();
        let global = context.global(scope);
        let name = convert::string(scope, "WebAssembly")?;
        let original = global.get(scope, name.into())?;
        global.delete(scope, name.into())?;
        let installer = v8::Local::<v8::Function>::try_from(v8::Local::new(scope, installer)).ok()?;
        let reserve = v8::Function::builder(reserve).build(scope)?;
        let release = v8::Function::builder(release).build(scope)?;
        let icu = v8::Function::builder(icu).build(scope)?;
        let intl = v8::Number::new(scope, INTL_OBJECT_BYTES);
        let call = v8::Number::new(scope, ICU_CALL_BYTES);
        let undefined = v8::undefined(scope).into();
        let natives = [reserve.into(), release.into(), icu.into(), intl.into(), call.into()];
        let enable = installer.call(scope, undefined, &natives)?;
        let enable = v8::Local::<v8::Function>::try_from(enable).ok()?;
        Some(Bounds { original: v8::Global::new(scope, original), enable: v8::Global::new(scope, enable) })
    }

    /// Put `WebAssembly` back on the global, its modules and memories charged.
    pub(super) fn enable_web_assembly<'s>(
        &self,
        scope: &mut v8::PinScope<'s, '_>,
    ) -> Option<v8::Local<'s, v8::Value>> {
        let enable = v8::Local::new(scope, &self.enable);
        let original = v8::Local::new(scope, &self.original);
        let undefined = v8::undefined(scope).into();
        enable.call(scope, undefined, &[original])
    }
}

/// The byte count a native of this file was called with: anything but a finite number
/// from 0 is past the address space, refused like the address space itself.
fn bytes_of(scope: &mut v8::PinScope<'_, '_>, args: &v8::FunctionCallbackArguments<'_>) -> usize {
    let bytes = args.get(0).number_value(scope).unwrap_or(f64::NAN);
    if bytes.is_finite() && bytes >= 0.0 { bytes.min(usize::MAX as f64) as usize } else { usize::MAX }
}

/// `reserve(bytes)`: charge the budget, or stop the isolate when it has no room.
fn reserve(
    scope: &mut v8::PinScope<'_, '_>,
    args: v8::FunctionCallbackArguments<'_>,
    _: v8::ReturnValue<'_, v8::Value>,
) {
    let Some(shared) = scope.get_slot::<Rc<Shared>>().cloned() else { return };
    if !shared.account.charge(bytes_of(scope, &args)) {
        scope.terminate_execution();
    }
}

/// `release(bytes)`: give back what a `reserve` charged for one builtin's call.
fn release(
    scope: &mut v8::PinScope<'_, '_>,
    args: v8::FunctionCallbackArguments<'_>,
    _: v8::ReturnValue<'_, v8::Value>,
) {
    let Some(shared) = scope.get_slot::<Rc<Shared>>().cloned() else { return };
    let bytes = bytes_of(scope, &args);
    if bytes != usize::MAX {
        shared.account.release(bytes);
    }
}

/// `icu(bytes)`: count ICU garbage made; past [`ICU_GARBAGE_BYTES`] since the last time,
/// collect the heap, which frees the ICU objects of the wrappers it finds dead.
fn icu(
    scope: &mut v8::PinScope<'_, '_>,
    args: v8::FunctionCallbackArguments<'_>,
    _: v8::ReturnValue<'_, v8::Value>,
) {
    let Some(shared) = scope.get_slot::<Rc<Shared>>().cloned() else { return };
    let garbage = shared.icu_garbage.get().saturating_add(bytes_of(scope, &args));
    if garbage < ICU_GARBAGE_BYTES {
        shared.icu_garbage.set(garbage);
        return;
    }
    shared.icu_garbage.set(0);
    scope.low_memory_notification();
}
