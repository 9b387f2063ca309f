//! What xtask's steps and its tests share: a cargo command that does not inherit the
//! variables cargo set for the process running it, and the QuickJS patch series.

pub mod quickjs_patches;

pub use codemode_devtools::{cargo_command, set_by_cargo};
