#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::unreadable_literal)]
#![allow(clippy::missing_safety_doc)]
#![allow(clippy::upper_case_acronyms)]
#![allow(clippy::uninlined_format_args)]
#![no_std]

use ::core::ptr;

/// Common error message for converting between C `size_t` and Rust `usize`;
pub const SIZE_T_ERROR: &str =
    "conversion between C type 'size_t' and Rust type 'usize' overflowed.";

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

#[cfg(not(feature = "bindgen"))]
include!(concat!("bindings/", bindings_env!("TARGET"), ".rs"));

#[cfg(target_pointer_width = "64")]
include!("inlines/ptr_64.rs");

#[cfg(target_pointer_width = "32")]
include!("inlines/ptr_32_nan_boxing.rs");

include!("inlines/common.rs");

// codemode-rs: declared here rather than in each target's pre-generated bindings
// (PATCHES.md, section 7).
unsafe extern "C" {
    /// Leave the runtime to its allocator to free at once: see `quickjs.c`.
    pub fn JS_SetDiscardOnFree(rt: *mut JSRuntime);
    /// Start an execution afresh in a context made or renewed ahead of it (Math.random's
    /// state from `seed`, performance's time origin): see `quickjs.c` (PATCHES.md, section 11).
    pub fn JS_StartExecution(ctx: *mut JSContext, seed: u64);
}
