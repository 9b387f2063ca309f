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

/// Appended to every error where the code fits no accepted form.
const ACCEPTED_FORMS: &str = "Accepted forms: an async arrow function such as `async () => { ... }`, a function, an expression, statements with top-level await, or `export default` of a function or a value, each bare or in one Markdown code block.";

const MODULE_SYNTAX: &str = "import and export are not available: the sandbox loads no modules. Reach data through the declared providers.";

fn refused(code: &str) -> String {
    match normalize_code(code) {
        Ok(program) => panic!("{code:?} normalizes to {program:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn code_inside_a_markdown_fence() {
    for fence in [
        "```js",
        "```javascript",
        "```ts",
        "```typescript",
        "```tsx",
        "```jsx",
        "```mjs",
        "```cjs",
        "```python",
        "```js title=\"x.js\"",
        "``` js ",
        "```",
        "```JS",
        "  ```js",
    ] {
        assert_eq!(normalized(&format!("{fence}\nasync () => 1\n```")), "async () => 1", "{fence}");
        assert_eq!(normalized(&format!("{fence}\nasync () => 1\n```\n")), "async () => 1", "{fence}");
    }
    assert_eq!(normalized("```js\nawait store.x()\n```\n"), "async () => {\nreturn (await store.x());\n}");
    assert_eq!(normalized("```js\r\nasync () => 1\r\n```\r\n"), "async () => 1");
}

#[test]
fn tilde_fences_and_longer_fences() {
    assert_eq!(normalized("~~~\nasync () => 1\n~~~"), "async () => 1");
    assert_eq!(normalized("~~~tsx\nasync () => 1\n~~~~\n"), "async () => 1");
    // A closing fence is at least as long as the opening one: the ``` inside is code.
    assert_eq!(normalized("````js\n/*\n```\n*/\nasync () => 1\n````"), "async () => 1");
    assert_eq!(normalized("~~~js\n/*\n```\n*/\nasync () => 1\n~~~"), "async () => 1");
}

#[test]
fn a_closing_fence_may_be_missing_or_stuck_to_the_code() {
    assert_eq!(normalized("```js\nasync () => 1"), "async () => 1");
    assert_eq!(normalized("```js\nasync () => 1```"), "async () => 1");
    assert_eq!(normalized("```tsx\nasync () => 1 ```\n"), "async () => 1");
}

#[test]
fn prose_around_one_fenced_block() {
    for code in [
        "Here is the program:\n```js\nasync () => 1\n```\nThis returns 1.",
        "Here is the program:\n\n```tsx\nasync () => 1\n```",
        "```js\nasync () => 1\n```\n\nIt returns 1.",
        // Prose that parses as JavaScript (a label, a name): the fence is still Markdown.
        "Program:\n```js\nasync () => 1\n```",
        "```js\nasync () => 1\n```\nDone",
    ] {
        assert_eq!(normalized(code), "async () => 1", "{code:?}");
    }
    assert_eq!(
        normalized(
            "I'll count the users.\n```js\nconst users = await store.listUsers()\nusers.length\n```\n"
        ),
        "async () => {\nconst users = await store.listUsers()\nreturn (users.length);\n}"
    );
    let error = normalize_code("Here it is:\n```js\nasync () => {\n  return (\n}\n```\nDone.").unwrap_err();
    assert_eq!((error.line(), error.column()), (5, 1), "lines count from the code as sent: {error}");
}

#[test]
fn markdown_that_javascript_carries_as_data_stays_javascript() {
    assert_eq!(
        normalized("const md = `\n~~~js\nx\n~~~\n`;\nmd"),
        "async () => {\nconst md = `\n~~~js\nx\n~~~\n`;\nreturn (md);\n}"
    );
    assert_eq!(
        normalized("/*\n```js\nx\n```\n*/\n1"),
        "async () => {\n/*\n```js\nx\n```\n*/\nreturn (1);\n}"
    );
}

#[test]
fn two_fenced_blocks_are_refused() {
    assert_eq!(
        refused("```js\nconst a = 1\n```\nthen\n```js\nasync () => a\n```"),
        format!(
            "SyntaxError in code at line 5, column 1: the code holds 2 Markdown code blocks; put the whole program in one. {ACCEPTED_FORMS}"
        )
    );
}

#[test]
fn export_default_is_the_program() {
    assert_eq!(normalized("export default async () => { return 1 }"), "async () => { return 1 }");
    assert_eq!(normalized("export default async () => 1;\n"), "async () => 1");
    assert_eq!(
        normalized("export default async function main() { return 1 }"),
        "async function main() { return 1 }"
    );
    assert_eq!(normalized("export default function () { return 1 }"), "function () { return 1 }");
    assert_eq!(normalized("export default (async () => 1)"), "(async () => 1)");
    assert_eq!(normalized("export default { a: 1 };"), "async () => ({ a: 1 })");
    assert_eq!(normalized("export default 42"), "async () => (42)");
    assert_eq!(normalized("export default await store.listUsers()"), "async () => (await store.listUsers())");
    assert_eq!(normalized("```tsx\nexport default async () => 1\n```"), "async () => 1");
}

#[test]
fn export_default_after_statements_runs_them_first_then_the_export() {
    assert_eq!(
        normalized("const helper = () => 1\nexport default async () => helper()"),
        "async () => {\nconst helper = () => 1\nconst __default = async () => helper();\nreturn (__default());\n}"
    );
    assert_eq!(
        normalized(
            "const base = 10\nexport default async function main() { return base + helper() }\nfunction helper() { return 1 }"
        ),
        "async () => {\nconst base = 10\nasync function main() { return base + helper() }\nfunction helper() { return 1 }\nreturn (main());\n}"
    );
    assert_eq!(
        normalized("const x = 1;\nexport default { x };"),
        "async () => {\nconst x = 1;\nconst __default = { x };\nreturn (typeof __default === \"function\" ? __default() : __default);\n}"
    );
    assert_eq!(
        normalized("const main = async () => 1\nexport default main"),
        "async () => {\nconst main = async () => 1\nconst __default = main;\nreturn (typeof __default === \"function\" ? __default() : __default);\n}"
    );
    // The name bound to the export is one the code does not use.
    assert_eq!(
        normalized("const __default = 1\nexport default () => __default // the value"),
        "async () => {\nconst __default = 1\nconst __default_ = () => __default; // the value\nreturn (__default_());\n}"
    );
    assert_eq!(
        normalized("const n = 2\nexport default class Counter {}"),
        "async () => {\nconst n = 2\nclass Counter {}\nreturn (Counter);\n}"
    );
}

#[test]
fn import_and_named_exports_are_refused() {
    assert_eq!(
        refused("export const x = 1"),
        format!("SyntaxError in code at line 1, column 1: {MODULE_SYNTAX}")
    );
    assert_eq!(
        refused("const a = 1\nexport { a }"),
        format!("SyntaxError in code at line 2, column 1: {MODULE_SYNTAX}")
    );
    assert_eq!(
        refused("async function main() {}\nexport { main as default }"),
        format!("SyntaxError in code at line 2, column 1: {MODULE_SYNTAX}")
    );
    assert_eq!(
        refused("```js\nimport fs from 'fs'\nexport default async () => fs\n```"),
        format!("SyntaxError in code at line 2, column 1: {MODULE_SYNTAX}")
    );
}

#[test]
fn empty_code_is_an_empty_async_arrow() {
    assert_eq!(normalized(""), "async () => {}");
    assert_eq!(normalized("  \n "), "async () => {}");
    assert_eq!(normalized("```js\n```"), "async () => {}");
    assert_eq!(normalized("~~~\n\n~~~\n"), "async () => {}");
}

#[test]
fn when_nothing_fits_the_error_says_where_and_which_forms_fit() {
    let error = normalize_code("const x = 1\nconst = 2").unwrap_err();
    assert_eq!((error.line(), error.column()), (2, 7));
    assert_eq!(error.message(), "Unexpected token");
    assert_eq!(
        error.to_string(),
        format!("SyntaxError in code at line 2, column 7: Unexpected token. {ACCEPTED_FORMS}")
    );
    assert_eq!(
        refused("Here is the program: it lists the users."),
        format!(
            "SyntaxError in code at line 1, column 5: Expected a semicolon or an implicit semicolon after a statement, but found none. {ACCEPTED_FORMS}"
        )
    );
    let fenced = normalize_code("```js\nasync () => {\n  return (\n}\n```").unwrap_err();
    assert_eq!(fenced.line(), 4, "lines count from the code as sent: {fenced}");
    assert_eq!(
        refused("import fs from 'fs'\nfs"),
        format!("SyntaxError in code at line 1, column 1: {MODULE_SYNTAX}")
    );
}

proptest! {
    #[test]
    fn the_normalizer_never_panics(code in ".*") {
        let _ = normalize_code(&code);
    }

    #[test]
    fn the_normalizer_never_panics_on_code_like_text(code in "[a-z(){};=>`~ \n'\"0-9/*]{0,40}") {
        let _ = normalize_code(&code);
        let _ = normalize_code(&format!("```js\n{code}"));
        let _ = normalize_code(&format!("Here:\n```js\n{code}\n```\nDone"));
    }

    /// Whatever follows the backticks on the fence line is the info string, never code.
    #[test]
    fn any_info_string_is_dropped(info in "[ -_a-~]{0,40}") {
        let code = format!("```{info}\nasync () => 1\n```");
        prop_assert_eq!(normalize_code(&code), Ok("async () => 1".to_owned()), "{:?}", code);
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
