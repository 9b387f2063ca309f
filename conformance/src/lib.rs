//! codemode-conformance: golden transcripts and a runner for any executor (filled by issue 4).
