//! Tool tables: sandbox names, routes, how arguments sit, the JSON Schema output.

use codemode_protocol::tools::{
    Parameters, ProviderSpec, RESERVED_TOOL_NAMES, ToolSpec, ToolTable, sandbox_name,
};
use proptest::prelude::*;
use serde_json::json;

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

proptest! {
    #[test]
    fn a_sandbox_name_is_always_an_identifier_and_stable(name in "\\PC{0,12}|[a-z0-9_.\\- ]{0,8}") {
        let sandbox = sandbox_name(&name);
        prop_assert!(is_identifier(&sandbox), "{name:?} became {sandbox:?}");
        prop_assert!(!RESERVED_TOOL_NAMES.contains(&sandbox.as_ref()));
        prop_assert_eq!(sandbox_name(&sandbox), sandbox.clone());
        if is_identifier(&name) && !RESERVED_TOOL_NAMES.contains(&name.as_str()) {
            prop_assert_eq!(sandbox.as_ref(), name.as_str());
        }
    }

    #[test]
    fn an_accepted_table_routes_each_name_to_its_own_tool(names in prop::collection::vec("[a-c0-9_.\\-]{0,3}", 0..8)) {
        let provider = names.iter().fold(ProviderSpec::new("p"), |p, n| p.tool(ToolSpec::new(n, "")));
        let Ok(table) = ToolTable::new(vec![provider]) else { return Ok(()) };
        let sandbox: Vec<&str> = table.tools().map(|(_, _, name, _)| name).collect();
        for (i, name) in sandbox.iter().enumerate() {
            prop_assert!(!sandbox[..i].contains(name), "two tools became {name}");
        }
        for (route, _, name, spec) in table.tools() {
            prop_assert_eq!(table.route("p", name), Some(route));
            prop_assert_eq!(table.route("p", &spec.name), Some(route));
        }
    }
}

fn table(positional: bool, input: serde_json::Value) -> ToolTable {
    let provider = ProviderSpec::new("store")
        .positional_args(positional)
        .tool(ToolSpec::new("find", "").input_schema(input));
    ToolTable::new(vec![provider]).unwrap()
}

fn shaped(positional: bool, input: serde_json::Value, args: &str) -> String {
    let table = table(positional, input);
    let route = table.route("store", "find").unwrap();
    match table.arguments_json(route, args) {
        Ok(value) => value.to_string(),
        Err(error) => format!("error: {error}"),
    }
}

#[test]
fn positional_arguments_lie_on_the_parameters_the_schema_names() {
    let object = json!({ "type": "object", "properties": { "id": {"type": "string"}, "limit": {"type": "integer"} }, "required": ["id"] });
    assert_eq!(shaped(true, object.clone(), r#"["ada",2]"#), r#"{"id":"ada","limit":2}"#);
    assert_eq!(shaped(true, object.clone(), r#"["ada",null]"#), r#"{"id":"ada"}"#);
    assert_eq!(shaped(true, object.clone(), r#"[null,2]"#), r#"{"limit":2}"#);
    assert_eq!(
        shaped(true, object.clone(), r#"["ada",2,3]"#),
        "error: store.find(id, limit) takes at most 2 arguments, but was called with 3."
    );
    assert_eq!(shaped(false, object, r#"{"id":"ada"}"#), r#"{"id":"ada"}"#);

    let tuple = json!({ "type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}], "minItems": 2, "maxItems": 2 });
    assert_eq!(shaped(true, tuple.clone(), r#"["a"]"#), r#"["a",null]"#);
    assert_eq!(
        shaped(true, tuple, r#"["a",1,2]"#),
        "error: store.find(arg0, arg1) takes at most 2 arguments, but was called with 3."
    );
    let rest = json!({ "type": "array", "prefixItems": [{"type": "string", "title": "sql"}], "items": {} });
    assert_eq!(shaped(true, rest.clone(), r#"["q",1,2,3]"#), r#"["q",1,2,3]"#);
    assert_eq!(shaped(true, rest, r#"[]"#), r#"[null]"#);

    assert_eq!(shaped(true, json!({"type": "string"}), r#"["x"]"#), r#""x""#);
    assert_eq!(
        shaped(true, json!({"type": "string"}), r#"["x","y"]"#),
        "error: store.find(value) takes at most 1 argument, but was called with 2."
    );
    assert_eq!(shaped(true, json!({"type": "null"}), "[]"), "null");
    assert_eq!(shaped(false, json!({"type": "null"}), "{}"), "null");
    assert_eq!(
        shaped(true, json!({"type": "null"}), "[1]"),
        "error: store.find() takes no arguments, but was called with 1."
    );
    assert_eq!(shaped(true, json!(true), "[1]"), "1");
    assert_eq!(
        shaped(true, json!({"type": "string"}), "[1"),
        "error: The arguments of store.find are not JSON: EOF while parsing a list at line 1 column 2"
    );
}

#[test]
fn bytes_are_one_parameter_and_a_ref_at_the_root_is_followed() {
    let bytes = serde_json::to_value(schemars::schema_for!(codemode_protocol::Bytes)).unwrap();
    let table = table(true, bytes);
    let route = table.route("store", "find").unwrap();
    assert!(matches!(table.parameters(route), Parameters::Single(_)));

    let referenced = json!({ "$ref": "#/$defs/Find", "$defs": { "Find": { "type": "object", "properties": { "id": {"type": "string"} } } } });
    assert_eq!(shaped(true, referenced, r#"["ada"]"#), r#"{"id":"ada"}"#);
}

#[test]
fn the_json_schema_output_names_each_tool_as_the_sandbox_does() {
    let provider = ProviderSpec::new("github")
        .description("Issues and pull requests.")
        .tool(
            ToolSpec::new("list-issues", "List issues.")
                .input_schema(json!({"type": "object", "properties": {}})),
        )
        .tool(ToolSpec::new("search", ""));
    let table = ToolTable::new(vec![provider]).unwrap();
    assert_eq!(
        table.json_schemas(),
        json!({ "providers": [{
            "name": "github",
            "description": "Issues and pull requests.",
            "positionalArgs": true,
            "tools": [
                { "name": "list_issues", "originalName": "list-issues", "description": "List issues.", "inputSchema": {"type": "object", "properties": {}} },
                { "name": "search" }
            ]
        }]})
    );
    assert_eq!(table.descriptors()[0].tools, ["list_issues", "search"]);
    assert_eq!(table.route("github", "nope"), None);
    assert_eq!(table.route("gitlab", "search"), None);
}

#[test]
fn a_spec_reads_and_writes_its_documented_form() {
    let text = r#"{"name":"store","positionalArgs":false,"tools":[{"name":"find","description":"Find.","inputSchema":{"type":"object"}}]}"#;
    let spec: ProviderSpec = serde_json::from_str(text).unwrap();
    assert_eq!(serde_json::to_string(&spec).unwrap(), text);
    let unknown = serde_json::from_str::<ProviderSpec>(r#"{"name":"store","tool":[]}"#).unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "unknown field `tool`, expected one of `name`, `description`, `positionalArgs`, `tools` at line 1 column 22"
    );
}
