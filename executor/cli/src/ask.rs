//! `codemode run --ask` and `--deny`: calls a person approves at the terminal.
//!
//! Each asked call is shown on stderr (provider, tool, and the arguments as readable JSON,
//! exactly what the dispatch gets if approved) and decided by one line read from stdin: a
//! line starting with `y` approves, one starting with `n` denies, and the rest of an `n`
//! line after a space is the reason (`n too risky`). Calls asked at once (one
//! `Promise.all`) are asked one after another. With no terminal on stdin nobody can be
//! asked: the call is denied, saying so.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_executor::{ApprovalPolicy, Approvals, Decision, HeldCall, ToolPattern};
use codemode_protocol::texts;

/// The approval flags of `codemode run`.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct ApprovalArgs {
    /// Ask on the terminal before each call matching PATTERN (PROVIDER.TOOL, either part
    /// may be *: db.exec, db.*); answer y to run it, n [REASON] to refuse it. Repeatable.
    #[arg(long = "ask", value_name = "PATTERN")]
    ask: Vec<String>,
    /// Refuse each call matching PATTERN without asking. Repeatable; wins over --ask.
    #[arg(long = "deny", value_name = "PATTERN")]
    deny: Vec<String>,
    /// How long an asked call waits for an answer, in milliseconds; 0 waits as long as it
    /// takes [default: 900000].
    #[arg(long, value_name = "N")]
    approval_timeout_ms: Option<u64>,
}

impl ApprovalArgs {
    /// The policy the flags say: denials first, then the calls to ask about. `Err` names
    /// a pattern that is not one.
    pub(crate) fn policy(&self) -> Result<ApprovalPolicy, String> {
        let parse = |text: &String| text.parse::<ToolPattern>().map_err(|e| e.to_string());
        let mut policy = ApprovalPolicy::new();
        for pattern in &self.deny {
            policy = policy.deny(parse(pattern)?, texts::DENIED_BY_FLAG.fill(&[pattern]));
        }
        for pattern in &self.ask {
            policy = policy.ask(parse(pattern)?);
        }
        Ok(match self.approval_timeout_ms {
            Some(0) => policy.timeout(None),
            Some(ms) => policy.timeout(Some(Duration::from_millis(ms))),
            None => policy,
        })
    }
}

/// The registry whose held calls are asked on this terminal (or denied without one).
pub(crate) fn terminal_approvals() -> Approvals {
    let one_at_a_time = Arc::new(Mutex::new(()));
    Approvals::asking(move |call: HeldCall| {
        let turn = one_at_a_time.clone();
        async move {
            if !std::io::stdin().is_terminal() {
                return Decision::Deny(texts::APPROVAL_NO_TERMINAL.to_owned());
            }
            let asked = tokio::task::spawn_blocking(move || {
                let _turn = turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                ask(&call, &mut std::io::stdin().lock(), &mut std::io::stderr())
            });
            asked.await.unwrap_or_else(|_| Decision::Deny(texts::APPROVAL_NO_TERMINAL.to_owned()))
        }
    })
}

/// Show `call` on `out` and read the answer from `input`, asking again until it is y or n.
fn ask(call: &HeldCall, input: &mut impl BufRead, out: &mut impl Write) -> Decision {
    let _ = write!(out, "{}", prompt(call));
    loop {
        let _ = write!(out, "{}", texts::ASK_PROMPT);
        let _ = out.flush();
        let mut line = String::new();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return Decision::Deny(texts::ASK_TERMINAL_CLOSED.to_owned()),
            Ok(_) => {}
        }
        if let Some(decision) = answer(line.trim_end_matches(['\n', '\r'])) {
            return decision;
        }
    }
}

/// What a person is shown: the call, with its arguments as readable JSON.
fn prompt(call: &HeldCall) -> String {
    let arguments = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| call.arguments.clone());
    texts::ASK_CALL.fill(&[&call.provider, &call.tool, &arguments])
}

/// One line's decision: `y…` approves, `n…` denies with the rest after a space as the
/// reason; anything else is asked again (`None`).
fn answer(line: &str) -> Option<Decision> {
    let line = line.trim_start();
    if line.starts_with(['y', 'Y']) {
        return Some(Decision::Approve);
    }
    if !line.starts_with(['n', 'N']) {
        return None;
    }
    let reason = line.split_once(' ').map(|(_, reason)| reason.trim()).filter(|reason| !reason.is_empty());
    Some(Decision::Deny(reason.unwrap_or(texts::ASK_DENIED_AT_TERMINAL).to_owned()))
}

#[cfg(test)]
mod tests {
    use super::{answer, ask};
    use codemode_executor::{Decision, ExecutionId, HeldCall, HeldId};

    #[test]
    fn a_line_decides_by_its_first_letter_and_n_carries_a_reason() {
        assert_eq!(answer("y"), Some(Decision::Approve));
        assert_eq!(answer("yes please"), Some(Decision::Approve));
        assert_eq!(answer("n too risky"), Some(Decision::Deny("too risky".into())));
        assert_eq!(answer("no"), Some(Decision::Deny("denied at the terminal".into())));
        assert_eq!(answer("maybe"), None);
        assert_eq!(answer(""), None);
    }

    #[test]
    fn the_prompt_shows_the_call_and_asks_again_until_answered() {
        let call = HeldCall {
            id: HeldId(1),
            execution: ExecutionId::next(),
            call: 1,
            provider: "db".into(),
            tool: "exec".into(),
            arguments: r#"["DELETE FROM orders",1]"#.into(),
            since: std::time::SystemTime::now(),
        };
        let mut out = Vec::new();
        let decision = ask(&call, &mut &b"what\nn not now\n"[..], &mut out);
        assert_eq!(decision, Decision::Deny("not now".into()));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "codemode: the program calls db.exec with\n[\n  \"DELETE FROM orders\",\n  1\n]\nApprove? y to run it, n [REASON] to refuse it: Approve? y to run it, n [REASON] to refuse it: "
        );
    }
}
