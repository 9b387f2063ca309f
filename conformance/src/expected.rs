//! Expected failures as data: a JSON list of `{"transcript", "reason"}` per implementation,
//! and the verdict on a case that is listed (an expected failure that passes fails).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::runner::Failure;

/// A case an implementation is known to fail, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedFailure {
    /// The transcript's file name, `names-fetch.json`.
    pub transcript: String,
    /// Why it fails there.
    pub reason: String,
}

/// Read a list of expected failures; a file that is not one is named with the problem.
pub fn load_expected_failures(path: &Path) -> Result<Vec<ExpectedFailure>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a list of {{transcript, reason}}: {e}", path.display()))
}

/// What a case's result comes to once its expected failure, if any, is taken into account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It passed and was not listed.
    Pass,
    /// It failed and is listed: the reason, and the failure it showed.
    ExpectedFailure { reason: String, failure: Failure },
    /// It failed and is not listed, or it passed and is listed (`list` names the file to edit).
    Fail(Failure),
}

/// Judge `result` given the entry of `list` that names the case, if any.
pub fn judge(result: Result<(), Failure>, known: Option<&ExpectedFailure>, list: &str) -> Verdict {
    match (known, result) {
        (None, Ok(())) => Verdict::Pass,
        (None, Err(failure)) => Verdict::Fail(failure),
        (Some(known), Err(failure)) => Verdict::ExpectedFailure { reason: known.reason.clone(), failure },
        (Some(known), Ok(())) => Verdict::Fail(Failure {
            message: format!(
                "unexpectedly passed; remove it from {list} (listed as an expected failure: {})",
                known.reason
            ),
        }),
    }
}
