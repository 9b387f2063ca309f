//! The network: closed by default; with an outbound handler, the host decides every fetch.

use std::sync::{Arc, Mutex};

use crate::support::*;
use codemode_executor::{OutboundRequest, OutboundResponse, Request};

#[tokio::test]
async fn without_an_outbound_handler_fetch_rejects_with_the_closed_text() {
    let outcome = run(Request::new(
        "async () => { try { await fetch('https://example.com'); return 'reached' } catch (e) { return [e.name, e.message] } }",
    ))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":["TypeError","Network access is closed for this execution: fetch is refused. Reach data through the declared providers."],"logs":[]}"#
    );
}

#[tokio::test]
async fn with_an_outbound_handler_the_host_sees_the_request_and_decides() {
    let seen: Arc<Mutex<Vec<OutboundRequest>>> = Arc::default();
    let record = seen.clone();
    let outbound = move |request: OutboundRequest| {
        record.lock().unwrap().push(request.clone());
        async move {
            if request.url.starts_with("https://api.example.com/") {
                Ok(OutboundResponse {
                    status: 201,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: br#"{"created":true}"#.to_vec(),
                })
            } else {
                Err(format!("{} is not on this host's allow list", request.url))
            }
        }
    };
    let outcome = run(Request::new(
        "async () => {
          const r = await fetch('https://api.example.com/items', { method: 'post', headers: { 'X-Key': 'k' }, body: 'hello' });
          let refused;
          try { await fetch('https://evil.example/') } catch (e) { refused = e.message }
          return [r.status, r.ok, r.headers.get('Content-Type'), await r.json(), refused];
        }",
    )
    .outbound(outbound))
    .await;
    assert_eq!(
        json(&outcome),
        r#"{"result":[201,true,"application/json",{"created":true},"https://evil.example/ is not on this host's allow list"],"logs":[]}"#
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[0],
        OutboundRequest {
            method: "POST".into(),
            url: "https://api.example.com/items".into(),
            headers: vec![("x-key".into(), "k".into())],
            body: b"hello".to_vec(),
        }
    );
    assert_eq!(seen.len(), 2);
}
