//! codemode-executor: runs programs in a fresh sandboxed engine (filled by issue 3).
