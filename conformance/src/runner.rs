//! The runner: plays the host from a transcript's exchanges and compares the outcome.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use codemode_protocol::{DispatchFuture, ToolCall, error_envelope};

use crate::implementation::Implementation;
use crate::transcript::Transcript;

/// How long the runner keeps listening after the outcome, so a stray late call is caught.
pub const GRACE: Duration = Duration::from_millis(100);

/// Why a case failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong, with expected and actual where there are both.
    pub message: String,
}

/// Plays the host: the n-th call must be the n-th exchange's call, to the byte.
struct Player {
    /// Each call expected, the answer, and how long the host takes to give it.
    exchanges: Vec<(ToolCall, String, Duration)>,
    arrived: Mutex<Vec<ToolCall>>,
}

impl codemode_protocol::Dispatch for Player {
    fn dispatch(&self, call: ToolCall) -> DispatchFuture {
        let mut arrived = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        let index = arrived.len();
        arrived.push(call.clone());
        let (answer, after) = match self.exchanges.get(index) {
            Some((expected, answer, after)) if *expected == call => (answer.clone(), *after),
            _ => (error_envelope("The conformance runner did not expect this call."), Duration::ZERO),
        };
        if after.is_zero() {
            return Box::pin(std::future::ready(answer));
        }
        Box::pin(async move {
            tokio::time::sleep(after).await;
            answer
        })
    }
}

fn first_difference(expected: &str, actual: &str) -> String {
    let at = expected.chars().zip(actual.chars()).take_while(|(a, b)| a == b).count();
    format!(
        "first difference at character {at}: expected {:?}, got {:?}",
        tail(expected, at),
        tail(actual, at)
    )
}

fn tail(text: &str, at: usize) -> String {
    text.chars().skip(at).take(40).collect()
}

/// Run one transcript against `implementation`.
pub async fn run_case(implementation: &dyn Implementation, transcript: &Transcript) -> Result<(), Failure> {
    let exchanges = transcript
        .exchanges
        .iter()
        .map(|e| (e.call.clone(), e.answer.clone(), Duration::from_millis(e.after_ms.unwrap_or(0))))
        .collect();
    let player = Arc::new(Player { exchanges, arrived: Mutex::new(Vec::new()) });
    let outcome = implementation
        .run(transcript.request.clone(), player.clone())
        .await
        .map_err(|message| Failure { message: format!("the implementation failed: {message}") })?;
    tokio::time::sleep(GRACE).await;
    let arrived = player.arrived.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (index, call) in arrived.iter().enumerate() {
        match transcript.exchanges.get(index) {
            Some(exchange) if exchange.call == *call => {}
            Some(exchange) => {
                return Err(Failure {
                    message: format!("call {} arrived as {call:?}; expected {:?}", index + 1, exchange.call),
                });
            }
            None => {
                return Err(Failure {
                    message: format!("call {} arrived beyond the exchanges: {call:?}", index + 1),
                });
            }
        }
    }
    if arrived.len() < transcript.exchanges.len() {
        let missing = &transcript.exchanges[arrived.len()].call;
        return Err(Failure {
            message: format!("call {} never arrived: expected {missing:?}", arrived.len() + 1),
        });
    }
    let expected = transcript.expected_outcome(implementation.engine());
    // A place is compared where the transcript names one; elsewhere it is the
    // implementation's to give or not.
    let outcome = if expected.location().is_none() { outcome.with_location(None) } else { outcome };
    let (expected, actual) = (expected.to_json_string(), outcome.to_json_string());
    if expected != actual {
        return Err(Failure {
            message: format!(
                "outcome differs\n  expected: {expected}\n  actual:   {actual}\n  {}",
                first_difference(&expected, &actual)
            ),
        });
    }
    Ok(())
}
