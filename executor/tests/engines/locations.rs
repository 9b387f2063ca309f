//! Where an error arose: every thrown Error and syntax error carries its place in the code
//! as sent (`location`), the same on every engine, whatever the normalizer wrapped around it.

use crate::support::*;
use codemode_executor::Request;
use codemode_protocol::{
    Latch, Location, OutcomeKind, ProviderDescriptor, ToolCall, create_envelope_dispatch,
};

/// The outcome of `code`: its kind, text and location.
async fn place(code: &str) -> (OutcomeKind, String, Option<Location>) {
    let outcome = run(Request::new(code)).await;
    (outcome.kind(), outcome.error_text().unwrap_or_default().to_owned(), outcome.location())
}

fn at(line: u32, column: u32) -> Option<Location> {
    Some(Location { line, column })
}

fn thrown(text: &str, location: Option<Location>) -> (OutcomeKind, String, Option<Location>) {
    (OutcomeKind::Thrown, text.to_owned(), location)
}

#[tokio::test]
async fn a_throw_on_line_three_is_placed_there_with_the_text_unchanged() {
    let code = "async () => {\n  const rows = [1, 2];\n  if (rows.length < 3) throw new Error('too few rows');\n  return rows;\n}";
    let outcome = run(Request::new(code)).await;
    assert_eq!(
        json(&outcome),
        r#"{"error":"too few rows","kind":"thrown","location":{"line":3,"column":30},"logs":[]}"#
    );
    assert_eq!(outcome.error_display().as_deref(), Some("too few rows (at line 3, column 30)"));
}

#[tokio::test]
async fn an_error_inside_a_nested_function_is_placed_where_it_was_made() {
    let code = "async () => {\n  const check = (row) => {\n    if (!row.id) throw new TypeError('row without id');\n  };\n  [{ id: 1 }, {}].forEach(check);\n}";
    assert_eq!(place(code).await, thrown("row without id", at(3, 24)));
    // A helper the program calls from several places: where the helper threw.
    let code = "async () => {\n  function need(v) { if (v === undefined) throw new Error('missing'); return v }\n  need(1);\n  need(undefined);\n}";
    assert_eq!(place(code).await, thrown("missing", at(2, 49)));
}

#[tokio::test]
async fn the_engines_own_errors_are_placed_alike() {
    let cases = [
        // A property of null: at the access (V8 points at `x`, QuickJS at `o`).
        ("async () => {\n  const o = null;\n  return o.x;\n}", at(3, 10)),
        ("async () => {\n  const o = { a: null };\n  return o.a.b.c;\n}", at(3, 10)),
        // Calling what is not a function: at the callee's name.
        ("async () => {\n  const o = {};\n  return o.list.map(String);\n}", at(3, 17)),
        ("async () => {\n  const o = {};\n  o.f(String(1), Number('2'));\n}", at(3, 5)),
        // An unknown name, a non-iterable spread, mixing BigInt: at the statement (V8 says
        // no more than that for these).
        ("async () => {\n  return total + 1;\n}", at(2, 3)),
        ("async () => {\n  return [...5];\n}", at(2, 3)),
        ("async () => {\n  return 1n + 1;\n}", at(2, 3)),
        ("async () => {\n  for (const v of 5) {}\n}", at(2, 3)),
        // Assigning to a constant; destructuring null.
        ("async () => {\n  const x = 1;\n  x = 2;\n}", at(3, 3)),
        ("async () => {\n  const { rows } = null;\n}", at(2, 9)),
        // Inside a callback: the callback's place, not the call around it.
        ("async () => {\n  return [1, 2].map((n) => n.a.b);\n}", at(2, 28)),
        // A method on `this`, and a property of the literal null.
        ("async () => {\n  class A { m() { return this.x.y } }\n  return new A().m();\n}", at(2, 26)),
        // A builtin's own error: at the call of the builtin.
        ("async () => {\n  return JSON.parse('{');\n}", at(2, 15)),
    ];
    for (code, location) in cases {
        let (kind, _, got) = place(code).await;
        assert_eq!((kind, got), (OutcomeKind::Thrown, location), "{code}");
    }
}

#[tokio::test]
async fn a_syntax_error_carries_its_place_in_the_text_and_the_field() {
    let code = "async () => {\n  const x = 1\n  const = 2\n}";
    let outcome = run(Request::new(code)).await;
    assert_eq!(outcome.kind(), OutcomeKind::Syntax);
    assert_eq!(outcome.location(), at(3, 9));
    let text = outcome.error_text().unwrap();
    assert!(text.starts_with("SyntaxError in code at line 3, column 9: "), "{text}");
    // The text names its place already: the display does not repeat it.
    assert_eq!(outcome.error_display().as_deref(), Some(text));
    // Code that parses but that the engine refuses: the engine's text, placed.
    let (kind, _, location) = place("async () => {\n  let a = 1;\n  let a = 2;\n}").await;
    assert_eq!((kind, location), (OutcomeKind::Syntax, at(3, 3)));
}

#[tokio::test]
async fn a_program_in_a_fence_after_prose_counts_the_prose() {
    let code = "Here is the program:\n\n```js\nconst o = null;\nconsole.log(o.name);\n```\nIt logs a name.";
    // The engine's own text differs between engines; its place does not.
    let (kind, _, location) = place(code).await;
    assert_eq!((kind, location), (OutcomeKind::Thrown, at(5, 13)));
    let code = "Sure:\n~~~\nthrow new Error('fenced')\n~~~";
    assert_eq!(place(code).await, thrown("fenced", at(3, 7)));
}

#[tokio::test]
async fn statements_with_top_level_await_are_placed_as_sent() {
    let code = "const rows = await Promise.resolve([]);\nif (rows.length === 0) {\n  throw new Error('no rows');\n}\nrows";
    assert_eq!(place(code).await, thrown("no rows", at(3, 9)));
    let code = "const first = await Promise.resolve(null);\nfirst.name";
    let (kind, _, location) = place(code).await;
    assert_eq!((kind, location), (OutcomeKind::Thrown, at(2, 1)));
    let code = "const base = 2;\nexport default async () => { throw new RangeError('base ' + base) }";
    assert_eq!(place(code).await, thrown("base 2", at(2, 36)));
}

#[tokio::test]
async fn a_failing_tool_call_is_placed_at_the_call() {
    let dispatch = create_envelope_dispatch(Latch::open(), |_call: ToolCall| async {
        Err::<(), _>("the database is down")
    });
    let code = "async () => {\n  const a = await store.ok();\n  const rows = await store.query('SELECT 1');\n  return rows;\n}";
    let outcome = run(Request::new(code)
        .provider(ProviderDescriptor::new("store", ["ok", "query"]))
        .dispatch(dispatch))
    .await;
    // The first call fails already: the place is that call's, where the program made it.
    assert_eq!(
        json(&outcome),
        r#"{"error":"the database is down","kind":"thrown","location":{"line":2,"column":25},"logs":[]}"#
    );
    // Caught and rethrown as it is: still the call's place.
    let rethrown = "async () => {\n  try {\n    await store.query(1);\n  } catch (e) {\n    throw e;\n  }\n}";
    let outcome = run(Request::new(rethrown)
        .provider(ProviderDescriptor::new("store", ["query"]))
        .dispatch(create_envelope_dispatch(Latch::open(), |_call: ToolCall| async { Err::<(), _>("no") })))
    .await;
    assert_eq!(outcome.location(), at(3, 17));
}

#[tokio::test]
async fn a_value_that_is_not_an_error_has_no_place() {
    assert_eq!(place("async () => {\n  throw 'plain text';\n}").await, thrown("plain text", None));
    assert_eq!(place("async () => {\n  throw { code: 7 };\n}").await, thrown("[object Object]", None));
    // An Error the program rebuilt without a stack, and one whose stack the program wrote.
    assert_eq!(
        place("async () => {\n  const e = new Error('x');\n  e.stack = '';\n  throw e;\n}").await,
        thrown("x", None)
    );
    // An error made outside the program's code (a provider's prelude) is placed at the
    // nearest frame in the program: the call into the prelude.
    let provider = ProviderDescriptor {
        prelude: Some("globalThis.helper = () => { throw new Error('from the prelude') };".to_owned()),
        ..ProviderDescriptor::new("store", ["x"])
    };
    let outcome = run(Request::new("async () => {\n  return helper();\n}").provider(provider)).await;
    assert_eq!((outcome.error_text(), outcome.location()), (Some("from the prelude"), at(2, 10)));
}

#[tokio::test]
async fn failures_of_the_run_itself_have_no_place() {
    let outcome =
        run(Request::new("async () => { while (true) {} }").timeout(std::time::Duration::from_millis(100)))
            .await;
    assert_eq!((outcome.kind(), outcome.location()), (OutcomeKind::Timeout, None));
    let outcome =
        run(Request::new("async () => { const a = []; while (true) a.push(new Array(1e5).fill(1)) }")
            .memory_limit_bytes(8 << 20))
        .await;
    assert_eq!((outcome.kind(), outcome.location()), (OutcomeKind::Memory, None));
}
