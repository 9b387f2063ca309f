//! The outcome rules of DESIGN.md: log formatting, thrown values, run failures, code forms.

use crate::support::*;
use codemode_executor::Request;
use serde_json::json;

async fn outcome(code: &str) -> String {
    json(&run(Request::new(code)).await)
}

#[tokio::test]
async fn log_arguments_are_formatted_by_kind_and_joined_by_one_space() {
    let code = r#"async () => {
      const cyclic = { name: 'loop' }; cyclic.self = cyclic;
      console.log('text', 1, 1.5, -0, 1e21, true, null, undefined, 10n, Symbol('tag'), Symbol());
      console.log(new Error('plain'), new TypeError('typed'), (a) => a + 1);
      console.log({ a: 1, nested: { b: [1, 'x'] } }, [1, 'two'], cyclic, new Uint8Array([1, 2]));
      console.log();
    }"#;
    assert_eq!(
        outcome(code).await,
        json!({ "logs": [
            "text 1 1.5 0 1e+21 true null undefined 10 Symbol(tag) Symbol()",
            "Error: plain TypeError: typed (a) => a + 1",
            r#"{"a":1,"nested":{"b":[1,"x"]}} [1,"two"] [object Object] {"0":1,"1":2}"#,
            "",
        ] })
        .to_string()
    );
}

#[tokio::test]
async fn console_methods_and_their_prefixes() {
    let code = "async () => { console.log('l'); console.info('i'); console.debug('d'); console.warn('w'); console.error('e', 2) }";
    assert_eq!(outcome(code).await, r#"{"logs":["l","i","d","[warn] w","[error] e 2"]}"#);
}

#[tokio::test]
async fn a_thrown_error_gives_its_message_and_logs_before_it_stay() {
    assert_eq!(
        outcome("async () => { console.log('before'); throw new RangeError('out of range') }").await,
        r#"{"error":"out of range","kind":"thrown","location":{"line":1,"column":44},"logs":["before"]}"#
    );
    assert_eq!(
        outcome("async () => { throw new Error() }").await,
        r#"{"error":"","kind":"thrown","location":{"line":1,"column":21},"logs":[]}"#
    );
}

#[tokio::test]
async fn any_other_thrown_value_gives_string_of_it() {
    for (thrown, text) in [
        ("'just text'", "just text"),
        ("42", "42"),
        ("null", "null"),
        ("undefined", "undefined"),
        ("{ a: 1 }", "[object Object]"),
        ("[1, 2]", "1,2"),
        ("{ toString() { return 'custom' } }", "custom"),
        ("Symbol('s')", "Symbol(s)"),
    ] {
        let code = format!("async () => {{ throw {thrown} }}");
        assert_eq!(
            outcome(&code).await,
            json!({ "error": text, "kind": "thrown", "logs": [] }).to_string(),
            "{thrown}"
        );
    }
}

#[tokio::test]
async fn a_thrown_value_whose_string_conversion_throws_still_gives_a_text() {
    for thrown in ["Object.create(null)", "{ toString() { throw new Error('no') } }"] {
        let code = format!("async () => {{ throw {thrown} }}");
        assert_eq!(
            outcome(&code).await,
            r#"{"error":"The program threw a value that cannot be converted to a string.","kind":"thrown","logs":[]}"#
        );
    }
}

#[tokio::test]
async fn results_in_the_codecs_form() {
    assert_eq!(outcome("async () => {}").await, r#"{"logs":[]}"#);
    assert_eq!(outcome("async () => null").await, r#"{"result":null,"logs":[]}"#);
    assert_eq!(
        outcome("async () => ({ b: 1, a: [true, 'x'] })").await,
        r#"{"result":{"b":1,"a":[true,"x"]},"logs":[]}"#
    );
    assert_eq!(
        outcome("async () => new Uint8Array([1, 2, 3]).buffer").await,
        r#"{"result":{"__executor_binary_v1__":"ArrayBuffer","data":"AQID"},"logs":[]}"#
    );
    // An engine's own text (docs/failures.md).
    let text = if crate::support::engine().name() == "v8" {
        "Do not know how to serialize a BigInt"
    } else {
        "BigInt are forbidden in JSON.stringify"
    };
    assert_eq!(
        outcome("async () => 10n").await,
        json!({ "error": text, "kind": "thrown", "logs": [] }).to_string()
    );
}

#[tokio::test]
async fn every_code_form_runs() {
    assert_eq!(outcome("1 + 2").await, r#"{"result":3,"logs":[]}"#);
    assert_eq!(outcome("const x = await Promise.resolve(20)\nx + 1").await, r#"{"result":21,"logs":[]}"#);
    assert_eq!(
        outcome("async function main() { return 'declared' }").await,
        r#"{"result":"declared","logs":[]}"#
    );
    assert_eq!(
        outcome("(function () { return 'expression' })").await,
        r#"{"result":"expression","logs":[]}"#
    );
    assert_eq!(outcome("```js\nasync () => 'fenced'\n```").await, r#"{"result":"fenced","logs":[]}"#);
    assert_eq!(outcome("").await, r#"{"logs":[]}"#);
    assert_eq!(outcome("return 5").await, r#"{"result":5,"logs":[]}"#);
}

#[tokio::test]
async fn a_syntax_error_says_where() {
    assert_eq!(
        outcome("const x = 1\nconst = 2").await,
        json!({ "error": format!("SyntaxError in code at line 2, column 7: {}. {}", codemode_protocol::normalize_code("const x = 1\nconst = 2").unwrap_err().message(), codemode_protocol::texts::CODE_ACCEPTED_FORMS), "kind": "syntax", "location": { "line": 2, "column": 7 }, "logs": [] }).to_string()
    );
}

#[tokio::test]
async fn a_syntax_error_in_provider_source_is_an_error_outcome() {
    let outcome = run(Request::new("async () => 1")
        .provider(codemode_protocol::ProviderDescriptor::new("store", ["x"]).prelude("store.x = {")))
    .await;
    assert!(outcome.error_text().is_some_and(|t| !t.is_empty()), "{}", json(&outcome));
}
