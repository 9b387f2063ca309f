//! codemode-conformance: golden transcripts of the tools guide, and a runner that checks
//! any executor against them (in-process, or a program speaking the wire protocol).

pub mod implementation;
pub mod runner;
pub mod transcript;

pub use implementation::{Implementation, InProcess, Subprocess};
pub use runner::{Failure, run_case};
pub use transcript::{Exchange, LoadError, Transcript, load, load_dir};
