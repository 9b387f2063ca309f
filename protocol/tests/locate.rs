//! Locations: a place in the entry scope taken back to the code as sent, through the
//! normalizer's forms, and settled on the syntax whichever token an engine points at.

use codemode_protocol::{ColumnUnit, Location, ProviderDescriptor, entry_scope};

/// Where `needle` (its `nth` occurrence, from 0) is in the entry scope of `code`: line and
/// column from 1, counted in `unit`.
fn place(scope: &str, needle: &str, nth: usize, unit: ColumnUnit) -> (u32, u32) {
    let offset = scope.match_indices(needle).nth(nth).expect("the needle is in the scope").0;
    let before = &scope[..offset];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |at| at + 1);
    let column = match unit {
        ColumnUnit::Utf8Bytes => before.len() - start,
        ColumnUnit::Utf16Units => before[start..].encode_utf16().count(),
    };
    (line as u32, column as u32 + 1)
}

/// The location of `needle` in `code`'s entry scope, as an engine would report it.
fn locate(code: &str, needle: &str, unit: ColumnUnit) -> Option<Location> {
    let scope = entry_scope(code, &[]).unwrap();
    let (line, column) = place(&scope.source, needle, 0, unit);
    scope.map.locate(line, column, unit)
}

fn at(line: u32, column: u32) -> Option<Location> {
    Some(Location { line, column })
}

#[test]
fn an_arrow_function_keeps_its_lines() {
    let code = "async () => {\n  const a = 1;\n  throw new Error('x');\n}";
    // QuickJS points at `Error`, V8 at `new`: both are the `new`.
    assert_eq!(locate(code, "Error('x')", ColumnUnit::Utf8Bytes), at(3, 9));
    assert_eq!(locate(code, "new Error", ColumnUnit::Utf16Units), at(3, 9));
}

#[test]
fn statements_are_located_through_their_wrapping() {
    // The last expression statement is wrapped in `return (...)`.
    let code = "const o = null;\nconst n = 2;\no.x";
    assert_eq!(locate(code, "o.x", ColumnUnit::Utf8Bytes), at(3, 1));
    assert_eq!(locate(code, "x);", ColumnUnit::Utf16Units), at(3, 1));
    let code = "const o = await Promise.resolve(null);\nreturn o.list.length;";
    assert_eq!(locate(code, "list", ColumnUnit::Utf16Units), at(2, 8));
}

#[test]
fn a_fence_and_prose_count_as_sent() {
    let code = "Here is the program:\n\n```js\nconst o = null;\nconsole.log(o.name);\n```\nIt logs a name.";
    assert_eq!(locate(code, "name))", ColumnUnit::Utf8Bytes), at(5, 13));
    assert_eq!(locate(code, "name))", ColumnUnit::Utf16Units), at(5, 13));
}

#[test]
fn a_default_export_is_located_through_its_wrapping() {
    let code = "const base = null;\nexport default async () => base.x;";
    assert_eq!(locate(code, "base.x", ColumnUnit::Utf8Bytes), at(2, 28));
    let code = "const v = 1;\nexport default { a: v.b.c };";
    assert_eq!(locate(code, "c }", ColumnUnit::Utf16Units), at(2, 21));
}

#[test]
fn a_name_read_is_located_at_its_statement() {
    // QuickJS points at the unknown name, V8 at its statement: the statement stands for both.
    let code = "async () => {\n  const a = 1;\n  return total + a;\n}";
    assert_eq!(locate(code, "total", ColumnUnit::Utf8Bytes), at(3, 3));
    assert_eq!(locate(code, "return total", ColumnUnit::Utf16Units), at(3, 3));
    // A statement the normalizer wrapped begins where the code's own text does.
    assert_eq!(locate("const a = 1;\ntotal + a", "total", ColumnUnit::Utf8Bytes), at(2, 1));
    // A name called is the call's: at the name.
    assert_eq!(locate("async () => {\n  return run(1);\n}", "(1)", ColumnUnit::Utf8Bytes), at(2, 10));
}

#[test]
fn a_call_is_located_at_its_callee() {
    let code = "async () => {\n  const o = {};\n  return o.list.map(x => x);\n}";
    assert_eq!(locate(code, "map(", ColumnUnit::Utf8Bytes), at(3, 17));
    // A place inside a nested function is that function's, not the call's around it.
    let code = "async () => [1].map(x => x.a.b)";
    assert_eq!(locate(code, "b)", ColumnUnit::Utf16Units), at(1, 26));
    assert_eq!(locate(code, "x.a.b", ColumnUnit::Utf8Bytes), at(1, 26));
}

#[test]
fn columns_count_characters_in_the_code_and_units_in_the_scope() {
    let code = "async () => {\n  const s = 'é€𝄞'; return s.a.b;\n}";
    // `s` is the 27th character; before it, 29 UTF-8 bytes and 27 UTF-16 units... of the line.
    assert_eq!(locate(code, "a.b;", ColumnUnit::Utf8Bytes), at(2, 27));
    assert_eq!(locate(code, "b;", ColumnUnit::Utf16Units), at(2, 27));
}

#[test]
fn a_place_outside_the_program_has_no_location() {
    let provider = ProviderDescriptor {
        prelude: Some("globalThis.helper = () => null.x;".to_owned()),
        ..ProviderDescriptor::new("store", ["find"])
    };
    let scope = entry_scope("async () => helper()", &[provider]).unwrap();
    let (line, column) = place(&scope.source, "null.x", 0, ColumnUnit::Utf8Bytes);
    assert_eq!(scope.map.locate(line, column, ColumnUnit::Utf8Bytes), None);
    let (line, column) = place(&scope.source, "helper()", 0, ColumnUnit::Utf8Bytes);
    assert_eq!(scope.map.locate(line, column, ColumnUnit::Utf8Bytes), at(1, 13));
    // Past the end of a line, or before the program's first line.
    assert_eq!(scope.map.locate(line, 500, ColumnUnit::Utf8Bytes), None);
    assert_eq!(scope.map.locate(1, 1, ColumnUnit::Utf8Bytes), None);
}
