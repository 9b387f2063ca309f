//! Approvals over MCP: a held call asked of the person behind the MCP client whose
//! `execute` started the run, by an elicitation request (MCP 2025-06-18 and later).
//!
//! Invariants:
//! - Each run's [`Approvals`] asks through the peer of the session that started it, also
//!   when the run goes on in a cell past its `execute` call: the peer stays valid while
//!   the session lives, and a closed session's request fails, which denies the call.
//! - The message is [`texts::APPROVAL_ELICITATION`] with the arguments' JSON indented by
//!   [`indent_json`], which changes whitespace only: every key, number and string is the
//!   text the dispatch gets.
//! - Accept approves the call as made; decline denies it with the reason the person gave,
//!   or [`texts::APPROVAL_DECLINED`]; cancel, an error or a closed session deny it with
//!   [`texts::APPROVAL_ELICITATION_CANCELLED`]; a client that cannot elicit (no
//!   `elicitation` capability, or a protocol that forbids server requests) is never sent
//!   one, and the call is denied with [`texts::APPROVAL_NO_ELICITATION`].

use std::time::Duration;

use codemode_protocol::texts;
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    PrimitiveSchemaDefinition, ProtocolVersion, ServerRequest, StringSchema,
};
use rmcp::service::{Peer, PeerRequestOptions};

use crate::api::approval::{Approvals, Decision, HeldCall};

/// The field of the requested schema that carries a decline's reason.
pub const REASON_FIELD: &str = "reason";

/// A registry handing each held call to the person behind `peer` (none: nobody can be
/// asked, so each is denied with [`texts::APPROVAL_NO_ELICITATION`]); an elicitation
/// unanswered after `timeout` is withdrawn.
pub(crate) fn approvals(peer: Option<Peer<RoleServer>>, timeout: Option<Duration>) -> Approvals {
    Approvals::asking(move |call: HeldCall| {
        let peer = peer.clone();
        async move { ask(peer, &call, timeout).await }
    })
}

/// Whether `peer` can be sent a form elicitation: it declared the capability (form, or
/// neither mode, which means form), on a protocol that lets a server send requests.
pub fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    let Some(info) = peer.peer_info() else { return false };
    let declared = info.capabilities.elicitation.as_ref();
    info.protocol_version < ProtocolVersion::V_2026_07_28
        && declared.is_some_and(|modes| modes.form.is_some() || modes.url.is_none())
}

/// Ask the person behind `peer` about `call`: their decision, or a denial saying why
/// nobody decided.
async fn ask(peer: Option<Peer<RoleServer>>, call: &HeldCall, timeout: Option<Duration>) -> Decision {
    let cancelled = || Decision::Deny(texts::APPROVAL_ELICITATION_CANCELLED.to_owned());
    let Some(peer) = peer.filter(can_elicit) else {
        return Decision::Deny(texts::APPROVAL_NO_ELICITATION.to_owned());
    };
    let Ok(requested_schema) = schema() else { return cancelled() };
    let params =
        ElicitRequestParams::FormElicitationParams { meta: None, message: message(call), requested_schema };
    let mut options = PeerRequestOptions::no_options();
    options.timeout = timeout;
    let answer = match peer
        .send_request_with_option(ServerRequest::ElicitRequest(ElicitRequest::new(params)), options)
        .await
    {
        Ok(handle) => handle.await_response().await,
        Err(error) => Err(error),
    };
    match answer {
        Ok(ClientResult::ElicitResult(result)) => decision(&result),
        _ => cancelled(),
    }
}

/// The decision an elicitation's answer means.
fn decision(result: &ElicitResult) -> Decision {
    match result.action {
        ElicitationAction::Accept => Decision::Approve,
        ElicitationAction::Decline => {
            let reason = result.content.as_ref().and_then(|content| content.get(REASON_FIELD));
            match reason.and_then(|reason| reason.as_str()).map(str::trim) {
                Some(reason) if !reason.is_empty() => Decision::Deny(reason.to_owned()),
                _ => Decision::Deny(texts::APPROVAL_DECLINED.to_owned()),
            }
        }
        // Cancel, or an action of a later protocol: nobody approved.
        _ => Decision::Deny(texts::APPROVAL_ELICITATION_CANCELLED.to_owned()),
    }
}

/// What the person reads: [`texts::APPROVAL_ELICITATION`] for `call`.
pub fn message(call: &HeldCall) -> String {
    texts::APPROVAL_ELICITATION.fill(&[&call.provider, &call.tool, &indent_json(&call.arguments)])
}

/// The form: one optional string, the reason for a decline.
fn schema() -> Result<ElicitationSchema, &'static str> {
    let reason = StringSchema::new()
        .title("Reason")
        .description("Why you decline the call (optional): the program reads it.");
    ElicitationSchema::builder().property(REASON_FIELD, PrimitiveSchemaDefinition::String(reason)).build()
}

/// `json` indented by two spaces a level, a key's value after `": "`, whitespace outside
/// strings dropped; everything else (keys, strings with their escapes, numbers) is kept
/// byte for byte, so the text means exactly what `json` means. Text that is not JSON is
/// reindented the same way, never refused.
pub fn indent_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = json.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|next| next.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&next| next == '}' || next == ']') {
                    continue;
                }
                depth += 1;
                newline(&mut out, depth);
            }
            '}' | ']' => {
                if !out.ends_with('{') && !out.ends_with('[') {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_and_nothing_else_changes() {
        assert_eq!(indent_json("[7]"), "[\n  7\n]");
        assert_eq!(indent_json("[]"), "[]");
        assert_eq!(indent_json("[{}, [ ]]"), "[\n  {},\n  []\n]");
        assert_eq!(
            indent_json(r#"["SELECT 1",{"a":1e400,"b":"x, \"y\": [z]"}]"#),
            "[\n  \"SELECT 1\",\n  {\n    \"a\": 1e400,\n    \"b\": \"x, \\\"y\\\": [z]\"\n  }\n]"
        );
        let text = r#"[{"zeta":[1,2,{"k":null}],"alpha":"\\"}]"#;
        let indented = indent_json(text);
        let strip = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(strip(&indented), strip(text));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&indented).unwrap(),
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
    }

    #[test]
    fn an_answer_is_a_decision() {
        let declined = |content: Option<serde_json::Value>| {
            let mut result = ElicitResult::new(ElicitationAction::Decline);
            result.content = content;
            decision(&result)
        };
        assert_eq!(decision(&ElicitResult::new(ElicitationAction::Accept)), Decision::Approve);
        assert_eq!(declined(None), Decision::Deny(texts::APPROVAL_DECLINED.to_owned()));
        assert_eq!(
            declined(Some(serde_json::json!({"reason": " not today "}))),
            Decision::Deny("not today".to_owned())
        );
        assert_eq!(
            declined(Some(serde_json::json!({"reason": ""}))),
            Decision::Deny(texts::APPROVAL_DECLINED.to_owned())
        );
        assert_eq!(
            decision(&ElicitResult::new(ElicitationAction::Cancel)),
            Decision::Deny(texts::APPROVAL_ELICITATION_CANCELLED.to_owned())
        );
    }
}
