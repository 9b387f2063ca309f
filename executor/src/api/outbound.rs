//! Outbound: the host's handler for `fetch`. Without one, the network is closed.

use std::future::Future;
use std::pin::Pin;

/// A `fetch(url, init)` as the program made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundRequest {
    /// `GET` unless `init.method` says otherwise (upper-cased).
    pub method: String,
    /// The URL, as the program wrote it.
    pub url: String,
    /// Header names (lower-cased) and values, in the order given.
    pub headers: Vec<(String, String)>,
    /// The body's bytes (a string body as UTF-8); empty for none.
    pub body: Vec<u8>,
}

/// What the host answers a `fetch` with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundResponse {
    /// The HTTP status.
    pub status: u16,
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The body's bytes.
    pub body: Vec<u8>,
}

/// The future an [`Outbound`] returns; an `Err` rejects the program's `fetch` with that text.
pub type OutboundFuture = Pin<Box<dyn Future<Output = Result<OutboundResponse, String>> + Send + 'static>>;

/// The host's network policy: it sees every `fetch` and decides.
pub trait Outbound: Send + Sync + 'static {
    /// Answer one request.
    fn fetch(&self, request: OutboundRequest) -> OutboundFuture;
}

impl<F, Fut> Outbound for F
where
    F: Fn(OutboundRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<OutboundResponse, String>> + Send + 'static,
{
    fn fetch(&self, request: OutboundRequest) -> OutboundFuture {
        Box::pin(self(request))
    }
}

impl From<OutboundRequest> for codemode_protocol::wire::FetchRequest {
    fn from(request: OutboundRequest) -> Self {
        codemode_protocol::wire::FetchRequest {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body.into(),
        }
    }
}

impl From<codemode_protocol::wire::FetchRequest> for OutboundRequest {
    fn from(request: codemode_protocol::wire::FetchRequest) -> Self {
        OutboundRequest {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body.into_vec(),
        }
    }
}

/// The wire's form of a handler's answer.
pub(crate) fn to_fetch_answer(
    answer: Result<OutboundResponse, String>,
) -> codemode_protocol::wire::FetchAnswer {
    use codemode_protocol::wire::FetchAnswer;
    match answer {
        Ok(response) => FetchAnswer::Response {
            status: response.status,
            headers: response.headers,
            body: response.body.into(),
        },
        Err(error) => FetchAnswer::Refused { error },
    }
}

/// A handler's answer, from the wire's form.
pub(crate) fn from_fetch_answer(
    answer: codemode_protocol::wire::FetchAnswer,
) -> Result<OutboundResponse, String> {
    use codemode_protocol::wire::FetchAnswer;
    match answer {
        FetchAnswer::Response { status, headers, body } => {
            Ok(OutboundResponse { status, headers, body: body.into_vec() })
        }
        FetchAnswer::Refused { error } => Err(error),
    }
}
