//! Code normalization: every form models send becomes a function expression.

use codemode_protocol::normalize_code;
use proptest::prelude::*;

fn normalized(code: &str) -> String {
    normalize_code(code).unwrap_or_else(|error| panic!("{code:?} normalizes: {error}"))
}

#[test]
fn functions_stay_as_they_are() {
    assert_eq!(normalized("async () => 1"), "async () => 1");
    assert_eq!(normalized("  async () => { return 1 };\n"), "async () => { return 1 }");
    assert_eq!(normalized("(async () => 1)"), "(async () => 1)");
    assert_eq!(normalized("async function main() { return 1 }"), "async function main() { return 1 }");
    assert_eq!(normalized("(function () { return 1 })"), "(function () { return 1 })");
    assert_eq!(normalized("async function () { return 1 }"), "async function () { return 1 }");
}

#[test]
fn an_expression_is_returned() {
    assert_eq!(normalized("1 + 2"), "async () => {\nreturn (1 + 2);\n}");
    assert_eq!(normalized("await store.listUsers()"), "async () => {\nreturn (await store.listUsers());\n}");
    assert_eq!(normalized("'hello'"), "async () => {\nreturn ('hello');\n}");
}

#[test]
fn statements_return_their_last_expression_statement() {
    assert_eq!(
        normalized("const users = await store.listUsers()\nusers.length // how many"),
        "async () => {\nconst users = await store.listUsers()\nreturn (users.length); // how many\n}"
    );
    assert_eq!(normalized("const x = 1; return x"), "async () => {\nconst x = 1; return x\n}");
    assert_eq!(normalized("let x = 1;"), "async () => {\nlet x = 1;\n}");
}

#[test]
fn code_inside_a_markdown_fence() {
    for fence in ["```js", "```javascript", "```ts", "```typescript", "```", "```JS"] {
        assert_eq!(normalized(&format!("{fence}\nasync () => 1\n```")), "async () => 1", "{fence}");
    }
    assert_eq!(normalized("```js\nawait store.x()\n```\n"), "async () => {\nreturn (await store.x());\n}");
}

#[test]
fn empty_code_is_an_empty_async_arrow() {
    assert_eq!(normalized(""), "async () => {}");
    assert_eq!(normalized("  \n "), "async () => {}");
    assert_eq!(normalized("```js\n```"), "async () => {}");
}

#[test]
fn when_nothing_fits_the_error_says_where() {
    let error = normalize_code("const x = 1\nconst = 2").unwrap_err();
    assert_eq!((error.line(), error.column()), (2, 7));
    assert!(error.to_string().starts_with("SyntaxError in code at line 2, column 7: "), "{error}");
    let fenced = normalize_code("```js\nasync () => {\n  return (\n}\n```").unwrap_err();
    assert_eq!(fenced.line(), 4, "lines count from the code as sent: {fenced}");
    assert_eq!(
        normalize_code("import fs from 'fs'\nfs").unwrap_err().to_string(),
        "SyntaxError in code at line 1, column 1: import and export are not available: the sandbox loads no modules. Reach data through the declared providers."
    );
}

proptest! {
    #[test]
    fn the_normalizer_never_panics(code in ".*") {
        let _ = normalize_code(&code);
    }

    #[test]
    fn the_normalizer_never_panics_on_code_like_text(code in "[a-z(){};=>` \n'\"0-9]{0,40}") {
        let _ = normalize_code(&code);
        let _ = normalize_code(&format!("```js\n{code}"));
    }
}

/// Nesting the parser recurses on, 100,000 deep, on a thread with tokio's 2 MiB stack:
/// each is an answer, never a stack overflow of the host.
#[test]
fn code_nested_any_depth_never_overflows_the_callers_stack() {
    let n = 100_000;
    let cases = [
        format!("async () => {}1{}", "(".repeat(n), ")".repeat(n)),
        format!("async () => {}1{}", "[".repeat(n), "]".repeat(n)),
        format!("async () => {}1", "!".repeat(n)),
        format!("async () => {}1", "-".repeat(2 * n).replace("--", "- -")),
        format!("async () => {}0", "x => ".repeat(n)),
        format!("async () => {}0{}", "a ? ".repeat(n), " : 1".repeat(n)),
        format!("async () => {}1{}", "{a:".repeat(n), "}".repeat(n)),
        "(".repeat(n),
    ];
    for code in cases {
        let head: String = code.chars().take(24).collect();
        let outcome = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                codemode_protocol::normalize_code(&code).map(|s| s.len()).map_err(|e| e.message().to_owned())
            })
            .unwrap()
            .join();
        assert!(outcome.is_ok(), "{head}…: the parser panicked");
    }
}

#[test]
fn code_past_the_limit_is_refused_with_the_limit() {
    let code = format!("async () => '{}'", "x".repeat(codemode_protocol::normalize::MAX_CODE_BYTES));
    let error = codemode_protocol::normalize_code(&code).unwrap_err();
    assert_eq!(
        error.to_string(),
        "SyntaxError in code at line 1, column 1: the code is 1048590 bytes, over the limit of 1048576 bytes for one program; send a shorter program"
    );
}
