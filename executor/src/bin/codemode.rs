//! The `codemode` command line (filled below).
fn main() {}
