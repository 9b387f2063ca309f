//! The TypeScript declarations of tool tables: exact texts, and the TypeScript compiler's word on them.
//!
//! Each fixture's whole text is pinned here. `the_typescript_compiler_accepts_the_declarations`
//! then runs `tsc --strict` once over all of them, over programs written against them,
//! over a program that must NOT type-check (so the check cannot pass vacuously) and
//! over ~200 generated tables, in one invocation (tsc costs seconds to start).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use codemode_protocol::Bytes;
use codemode_protocol::tools::{ProviderSpec, ToolSpec, ToolTable};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

fn schema<T: JsonSchema>() -> Json {
    serde_json::to_value(schemars::schema_for!(T)).expect("a schema is JSON")
}

fn table(providers: Vec<ProviderSpec>) -> ToolTable {
    ToolTable::new(providers).expect("the fixture is a valid table")
}

// ---- The shop: schemars-derived tools, positional and with options ----

/// The arguments of `findUser`.
#[derive(Serialize, Deserialize, JsonSchema)]
struct FindUserArgs {
    /// The user's id.
    id: String,
    /// At most this many.
    limit: Option<u32>,
}

/// A user of the shop.
#[derive(Serialize, Deserialize, JsonSchema)]
struct User {
    /// The user's id.
    id: String,
    email: Option<String>,
    address: Address,
    tags: Vec<String>,
    role: Role,
    avatar: Option<Bytes>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Address {
    street: String,
    city: String,
}

/// What a user may do.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Role {
    Admin,
    Customer,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Order {
    id: u64,
    lines: Vec<Line>,
    totals: HashMap<String, f64>,
    status: Status,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Line {
    sku: String,
    quantity: u32,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(tag = "state", rename_all = "camelCase")]
enum Status {
    Open,
    /// Sent on its way.
    Shipped {
        tracking: String,
    },
}

/// A category and those under it.
#[derive(Serialize, Deserialize, JsonSchema)]
struct Category {
    name: String,
    children: Vec<Category>,
    parent: Option<Box<Category>>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct ListUsersOptions {
    /// Only users with these roles.
    roles: Option<Vec<Role>>,
    page: Option<u32>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct DeleteUser {
    id: String,
}

#[derive(Serialize, Deserialize, JsonSchema)]
struct Upload {
    name: String,
    content: Bytes,
}

fn shop() -> ToolTable {
    table(vec![
        ProviderSpec::new("store")
            .description("The shop's data.")
            .tool(
                ToolSpec::new("findUser", "Find a user by id.")
                    .input_schema(schema::<FindUserArgs>())
                    .output_schema(schema::<User>()),
            )
            .tool(
                ToolSpec::new("listOrders", "Orders of a user, newest first.")
                    .input_schema(schema::<(String, u32)>())
                    .output_schema(schema::<Vec<Order>>()),
            )
            .tool(
                ToolSpec::new("categories", "")
                    .input_schema(schema::<()>())
                    .output_schema(schema::<Category>()),
            )
            .tool(
                ToolSpec::new("upload", "").input_schema(schema::<Upload>()).output_schema(schema::<Bytes>()),
            )
            .tool(ToolSpec::new("ping", "")),
        ProviderSpec::new("admin")
            .positional_args(false)
            .tool(
                ToolSpec::new("listUsers", "")
                    .input_schema(schema::<ListUsersOptions>())
                    .output_schema(schema::<Vec<User>>()),
            )
            .tool(
                ToolSpec::new("deleteUser", "")
                    .input_schema(schema::<DeleteUser>())
                    .output_schema(schema::<()>()),
            ),
    ])
}

const SHOP: &str = r#"/** The shop's data. */
declare const store: {
  /**
   * Find a user by id.
   * @param id The user's id.
   * @param limit At most this many.
   */
  findUser(id: string, limit?: number | null): Promise<User>;
  /** Orders of a user, newest first. */
  listOrders(arg0: string, arg1: number): Promise<Order[]>;
  categories(): Promise<Category>;
  upload(name: string, content: Uint8Array): Promise<Uint8Array>;
  ping(...args: unknown[]): Promise<unknown>;
};

declare const admin: {
  listUsers(options?: ListUsersOptions): Promise<User[]>;
  deleteUser(options: DeleteUser): Promise<null>;
};

/** A user of the shop. */
interface User {
  /** The user's id. */
  id: string;
  email?: string | null;
  address: Address;
  tags: string[];
  role: Role;
  avatar?: Uint8Array | null;
}

interface Address {
  street: string;
  city: string;
}

/** What a user may do. */
type Role = "admin" | "customer";

interface Order {
  id: number;
  lines: Line[];
  totals: Record<string, number>;
  status: Status;
}

interface Line {
  sku: string;
  quantity: number;
}

type Status = { state: "open" } | { state: "shipped"; tracking: string };

/** A category and those under it. */
interface Category {
  name: string;
  children: Category[];
  parent?: Category | null;
}

interface ListUsersOptions {
  /** Only users with these roles. */
  roles?: Role[] | null;
  page?: number | null;
}

interface DeleteUser {
  id: string;
}
"#;

#[test]
fn the_shop_renders_as_pinned() {
    assert_eq!(shop().declarations(), SHOP);
}

// ---- Hand-written draft-07 schemas, as MCP servers send them ----

fn mcp() -> ToolTable {
    let issue = json!({
        "type": "object",
        "properties": {
            "number": { "type": "integer" },
            "title": { "type": "string" },
            "state": { "type": "string", "enum": ["open", "closed"] },
            "assignee": { "$ref": "#/definitions/Person", "nullable": true },
            "labels": { "type": "array", "items": { "$ref": "#/definitions/Label" } },
            "x-position": {
                "type": "array",
                "items": [{ "type": "number" }, { "type": "number" }],
                "additionalItems": false
            },
            "reactions": { "type": "object", "additionalProperties": { "type": "integer" } },
            "extra": {
                "type": "object",
                "properties": { "source": { "type": "string" } },
                "required": ["source"],
                "additionalProperties": { "type": "boolean" }
            }
        },
        "required": ["number", "title", "state"]
    });
    table(vec![
        ProviderSpec::new("github")
            .description("GitHub, through its MCP server.")
            .tool(
                ToolSpec::new("list-issues", "List the issues of a repository.")
                    .input_schema(json!({
                        "$schema": "http://json-schema.org/draft-07/schema#",
                        "type": "object",
                        "properties": {
                            "owner": { "type": "string", "description": "Repository owner" },
                            "repo": { "type": "string", "description": "Repository name" },
                            "state": { "type": "string", "enum": ["open", "closed", "all"] },
                            "since": { "$ref": "#/definitions/Timestamp" },
                            "per-page": { "type": "integer", "minimum": 1, "maximum": 100 },
                            "default": { "type": "boolean" }
                        },
                        "required": ["owner", "repo"],
                        "definitions": {
                            "Timestamp": { "type": "string", "format": "date-time", "description": "ISO 8601." }
                        }
                    }))
                    .output_schema(json!({
                        "$schema": "http://json-schema.org/draft-07/schema#",
                        "type": "array",
                        "items": { "$ref": "#/definitions/Issue" },
                        "definitions": {
                            "Issue": issue,
                            "Person": {
                                "type": "object",
                                "properties": { "login": { "type": "string" }, "site_admin": { "type": "boolean" } },
                                "required": ["login"]
                            },
                            "Label": { "oneOf": [{ "type": "string" }, { "$ref": "#/definitions/Person" }] }
                        }
                    })),
            )
            .tool(
                ToolSpec::new("github.search", "")
                    .input_schema(json!({
                        "type": "object",
                        "properties": { "q": { "type": "string" }, "sort": { "type": "string" }, "page": { "type": "integer" } },
                        "required": ["q", "page"]
                    }))
                    .output_schema(json!({ "type": ["object", "null"], "properties": { "total": { "type": "integer" } } })),
            )
            .tool(
                ToolSpec::new("2fa code", "")
                    .input_schema(json!({ "type": "array", "items": [{ "type": "string", "title": "user" }, { "type": "integer" }] }))
                    .output_schema(json!({ "type": "string", "nullable": true })),
            ),
    ])
}

// ---- Names: the same name twice, other shapes, lib globals, keywords, the provider ----

fn names() -> ToolTable {
    let user = json!({ "type": "object", "properties": { "id": { "type": "string" } }, "required": ["id"] });
    let other_user = json!({ "type": "object", "properties": { "login": { "type": "string" } } });
    let with_defs = |defs: Json, root: Json| {
        let mut root = root;
        root["$defs"] = defs;
        root
    };
    table(vec![
        ProviderSpec::new("users")
            .tool(
                ToolSpec::new("get", "")
                    .output_schema(with_defs(json!({ "User": user }), json!({ "$ref": "#/$defs/User" }))),
            )
            .tool(ToolSpec::new("all", "").output_schema(with_defs(
                json!({ "User": user }),
                json!({ "type": "array", "items": { "$ref": "#/$defs/User" } }),
            )))
            .tool(
                ToolSpec::new("legacy", "").output_schema(with_defs(
                    json!({ "User": other_user }),
                    json!({ "$ref": "#/$defs/User" }),
                )),
            )
            .tool(ToolSpec::new("lib", "").output_schema(with_defs(
                json!({
                    "Promise": { "type": "object", "properties": { "done": { "type": "boolean" } } },
                    "Date": { "type": "string", "format": "date" },
                    "Record": { "type": "object", "properties": { "users": { "$ref": "#/$defs/users" } } },
                    "users": { "type": "integer" },
                    "default": { "enum": [1, 2.5, -3, "x", true, null] },
                    "2 odd/name~": { "type": "object", "properties": { "a-b": { "type": "string" } } }
                }),
                json!({
                    "type": "object",
                    "properties": {
                        "p": { "$ref": "#/$defs/Promise" },
                        "d": { "$ref": "#/$defs/Date" },
                        "r": { "$ref": "#/$defs/Record" },
                        "k": { "$ref": "#/$defs/default" },
                        "o": { "$ref": "#/$defs/2 odd~1name~0" }
                    },
                    "required": ["p", "d", "r", "k", "o"]
                }),
            )))
            .tool(ToolSpec::new("new", "Makes a user.").input_schema(schema::<DeleteUser>()))
            .tool(
                ToolSpec::new("then", "")
                    .input_schema(json!({ "type": "array", "prefixItems": [{ "type": "string" }] })),
            )
            .tool(ToolSpec::new("titled", "").input_schema(json!({
                "title": "String",
                "type": "object",
                "properties": { "tree": { "$ref": "#" } }
            }))),
    ])
}

// ---- Comments: descriptions that end a comment, span lines, deprecate ----

fn comments() -> ToolTable {
    table(vec![
        ProviderSpec::new("notes")
            .description("Notes. A note ends with */ and then\nthe next line.\r\n\r\nA paragraph.")
            .tool(
                ToolSpec::new("add", "Adds a note.\n\n*/ is no end here.")
                    .input_schema(json!({
                        "type": "object",
                        "properties": {
                            "text": { "type": "string", "description": "The text; /* comments */ too." },
                            "old": { "type": "string", "description": "  \n", "deprecated": true },
                            "meta": {
                                "type": "object",
                                "properties": {
                                    "tag": { "type": "string", "description": "One tag.\nNot two." },
                                    "when": { "type": "number" }
                                },
                                "required": ["when"]
                            }
                        },
                        "required": ["text"]
                    }))
                    .output_schema(json!({
                        "title": "Note",
                        "description": "A note.\u{0007} Bell.",
                        "type": "object",
                        "properties": { "id": { "type": "string", "description": "*/*/" } },
                        "required": ["id"]
                    })),
            ),
    ])
}

// ---- What TypeScript cannot say, and schemas that try to break the renderer ----

fn unknowns() -> ToolTable {
    table(vec![
        ProviderSpec::new("odd")
            .tool(ToolSpec::new("shapes", "").output_schema(json!({
                "type": "object",
                "properties": {
                    "not": { "not": { "type": "string" } },
                    "cond": { "if": { "type": "string" }, "then": { "minLength": 1 } },
                    "remote": { "$ref": "https://example.com/schema.json#/$defs/X" },
                    "missing": { "$ref": "#/$defs/Nowhere" },
                    "anchor": { "$ref": "#node" },
                    "patterns": { "type": "object", "patternProperties": { "^x-": { "type": "string" } } },
                    "closed": { "type": "object", "additionalProperties": false },
                    "anything": true,
                    "nothing": false,
                    "weird": { "type": "decimal" },
                    "constObject": { "const": { "a": [1, "two", null], "b-c": {} } },
                    "mixed": { "enum": ["a", 1, false, null, [1]] },
                    "both": { "allOf": [{ "$ref": "#/$defs/A" }, { "type": "object", "properties": { "z": { "type": "number" } } }] },
                    "either": { "anyOf": [{ "type": "string" }, { "type": "array", "items": { "anyOf": [{ "type": "string" }, { "type": "number" }] } }] },
                    "local": { "$ref": "#/properties/either" },
                    "self": { "$ref": "#/properties/self" },
                    "open": { "type": "object", "additionalProperties": { "type": "string" }, "properties": { "n": { "type": "number" } } },
                    "binary": {
                        "type": "object",
                        "properties": { "__executor_binary_v1__": { "enum": ["Float32Array", "ArrayBuffer", "Nope"] }, "data": { "type": "string" } }
                    },
                    "cycle": { "$ref": "#/$defs/A" },
                    "json": { "$ref": "#/$defs/Json" },
                    "tree": { "$ref": "#/$defs/Tree" }
                },
                "required": ["not"],
                "$defs": {
                    "A": { "$ref": "#/$defs/B" },
                    "B": { "anyOf": [{ "$ref": "#/$defs/A" }, { "type": "string" }] },
                    "Json": { "anyOf": [
                        { "type": ["string", "number", "boolean", "null"] },
                        { "type": "array", "items": { "$ref": "#/$defs/Json" } },
                        { "type": "object", "additionalProperties": { "$ref": "#/$defs/Json" } }
                    ] },
                    "Tree": { "type": "object", "additionalProperties": { "$ref": "#/$defs/Tree" } }
                }
            })))
            .tool(ToolSpec::new("tuple", "").input_schema(json!({
                "type": "array",
                "prefixItems": [
                    { "type": "string", "title": "class", "description": "A keyword as a title." },
                    { "type": "string", "title": "class" }
                ],
                "items": { "type": "integer" }
            })))
            .tool(ToolSpec::new("single", "").input_schema(json!({ "type": "string", "description": "Just text." })))
            .tool(ToolSpec::new("recursiveRoot", "").output_schema(json!({
                "anyOf": [{ "type": "string" }, { "type": "array", "items": { "$ref": "#" } }]
            }))),
    ])
}

#[test]
fn hand_written_draft_07_schemas_render_as_pinned() {
    assert_eq!(mcp().declarations(), MCP);
}

const MCP: &str = r#"/** GitHub, through its MCP server. */
declare const github: {
  /**
   * List the issues of a repository.
   * @param owner Repository owner
   * @param repo Repository name
   */
  list_issues(owner: string, repo: string, state?: "open" | "closed" | "all", since?: Timestamp, per_page?: number, default_?: boolean): Promise<Issue[]>;
  github_search(q: string, sort: string | undefined, page: number): Promise<{ total?: number } | null>;
  _2fa_code(user: string, arg1: number): Promise<string | null>;
};

/** ISO 8601. */
type Timestamp = string;

interface Issue {
  number: number;
  title: string;
  state: "open" | "closed";
  assignee?: Person | null;
  labels?: Label[];
  "x-position"?: [number, number];
  reactions?: Record<string, number>;
  extra?: { source: string; [key: string]: boolean | string };
}

interface Person {
  login: string;
  site_admin?: boolean;
}

type Label = string | Person;
"#;

#[test]
fn names_are_shared_when_the_shape_is_and_numbered_when_not_and_never_a_global() {
    assert_eq!(names().declarations(), NAMES);
}

const NAMES: &str = r#"declare const users: {
  get(...args: unknown[]): Promise<User>;
  all(...args: unknown[]): Promise<User[]>;
  legacy(...args: unknown[]): Promise<User2>;
  lib(...args: unknown[]): Promise<{ p: Promise2; d: Date2; r: Record2; k: default2; o: _2_odd_name_ }>;
  /** Makes a user. */
  "new"(id: string): Promise<unknown>;
  then_(arg0: string): Promise<unknown>;
  titled(tree?: String2): Promise<unknown>;
};

interface User {
  id: string;
}

interface User2 {
  login?: string;
}

interface Promise2 {
  done?: boolean;
}

type Date2 = string;

interface Record2 {
  users?: users2;
}

type users2 = number;

type default2 = 1 | 2.5 | -3 | "x" | true | null;

interface _2_odd_name_ {
  "a-b"?: string;
}

interface String2 {
  tree?: String2;
}
"#;

#[test]
fn descriptions_become_comments_that_nothing_in_them_can_end() {
    assert_eq!(comments().declarations(), COMMENTS);
}

const COMMENTS: &str = r#"/**
 * Notes. A note ends with *\/ and then
 * the next line.
 *
 * A paragraph.
 */
declare const notes: {
  /**
   * Adds a note.
   *
   * *\/ is no end here.
   * @param text The text; /* comments *\/ too.
   * @param old Deprecated.
   */
  add(text: string, old?: string, meta?: {
    /**
     * One tag.
     * Not two.
     */
    tag?: string;
    when: number;
  }): Promise<Note>;
};

/** A note.  Bell. */
interface Note {
  /** *\/*\/ */
  id: string;
}
"#;

#[test]
fn what_typescript_cannot_say_reads_unknown() {
    assert_eq!(unknowns().declarations(), UNKNOWNS);
}

const UNKNOWNS: &str = r#"declare const odd: {
  shapes(...args: unknown[]): Promise<{
    not: unknown;
    cond?: unknown;
    remote?: unknown;
    missing?: unknown;
    anchor?: unknown;
    patterns?: Record<string, unknown>;
    closed?: Record<string, never>;
    anything?: unknown;
    nothing?: never;
    weird?: unknown;
    constObject?: { a: [1, "two", null]; "b-c": Record<string, never> };
    mixed?: "a" | 1 | false | null | [1];
    both?: A & { z?: number };
    either?: string | (string | number)[];
    local?: string | (string | number)[];
    self?: unknown;
    open?: { n?: number; [key: string]: string | number | undefined };
    binary?: Float32Array | ArrayBuffer;
    cycle?: A;
    json?: Json;
    tree?: Tree;
  }>;
  /** @param class_ A keyword as a title. */
  tuple(class_: string, class_2: string, ...rest: number[]): Promise<unknown>;
  /** @param value Just text. */
  single(value: string): Promise<unknown>;
  recursiveRoot(...args: unknown[]): Promise<string | RecursiveRootOutput[]>;
};

type A = B;

type B = unknown;

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

type Tree = { [key: string]: Tree };

type RecursiveRootOutput = string | RecursiveRootOutput[];
"#;

#[test]
fn an_empty_table_has_no_declarations_and_a_provider_without_tools_is_an_empty_object() {
    assert_eq!(table(vec![]).declarations(), "");
    assert_eq!(table(vec![ProviderSpec::new("empty")]).declarations(), "declare const empty: {};\n");
}

#[test]
fn an_options_object_without_a_title_is_written_out_and_its_description_is_the_parameters() {
    let declarations = table(vec![ProviderSpec::new("mail").positional_args(false).tool(
        ToolSpec::new("send", "Sends a mail.").input_schema(json!({
            "type": "object",
            "description": "What to send.",
            "properties": { "to": { "type": "string" }, "cc": { "type": "array", "items": { "type": "string" } } },
            "required": ["to"]
        })),
    )])
    .declarations();
    assert_eq!(
        declarations,
        r#"declare const mail: {
  /**
   * Sends a mail.
   * @param options What to send.
   */
  send(options: { to: string; cc?: string[] }): Promise<unknown>;
};
"#
    );
}

// ---- Schemas that try to break the renderer: deep, long, explosive ----

/// `{"type": "array", "items": …}` nested `depth` times, built without recursion.
fn nested_arrays(depth: usize) -> Json {
    let mut schema = json!({ "type": "string" });
    for _ in 0..depth {
        schema = json!({ "type": "array", "items": schema });
    }
    schema
}

#[test]
fn a_deep_schema_reads_unknown_past_the_bound_instead_of_overflowing() {
    let deep = table(vec![
        ProviderSpec::new("deep").tool(ToolSpec::new("get", "").output_schema(nested_arrays(3000))),
    ]);
    let declarations = deep.declarations();
    assert!(declarations.contains("Promise<unknown[][]"), "{declarations}");
    assert!(!declarations.contains("string"), "past the bound, the leaf is not reached");
    // serde_json's Drop is recursive: free the deep value on a thread with room for it.
    std::thread::Builder::new().stack_size(64 << 20).spawn(move || drop(deep)).unwrap().join().unwrap();
}

#[test]
fn a_long_chain_of_definitions_renders_each_once() {
    let defs: serde_json::Map<String, Json> = (0..2000)
        .map(|i| {
            (
                format!("D{i}"),
                json!({ "anyOf": [{ "type": "null" }, { "$ref": format!("#/$defs/D{}", i + 1) }] }),
            )
        })
        .collect();
    let schema = json!({ "$ref": "#/$defs/D0", "$defs": defs });
    let declarations =
        table(vec![ProviderSpec::new("chain").tool(ToolSpec::new("get", "").output_schema(schema))])
            .declarations();
    assert!(declarations.contains("type D0 = null | D1;\n"));
    // D2000 is not there: the reference reads `unknown`, which swallows the union.
    assert!(declarations.ends_with("type D1998 = null | D1999;\n\ntype D1999 = unknown;\n"));
    assert_eq!(declarations.matches("\ntype ").count(), 2000);
}

#[test]
fn references_that_multiply_stop_at_the_work_bound() {
    // Each level names the next twice through a pointer that is not a definition, so it is
    // inlined: 2^40 schemas without a bound.
    let mut properties = serde_json::Map::new();
    for i in 0..40 {
        let next = json!({ "$ref": format!("#/properties/p{}", i + 1) });
        properties.insert(format!("p{i}"), json!({ "type": "array", "prefixItems": [next.clone(), next] }));
    }
    properties.insert("p40".into(), json!({ "type": "string" }));
    let schema = json!({ "type": "object", "properties": properties });
    let start = std::time::Instant::now();
    let declarations =
        table(vec![ProviderSpec::new("bomb").tool(ToolSpec::new("get", "").output_schema(schema))])
            .declarations();
    assert!(start.elapsed() < std::time::Duration::from_secs(20), "took {:?}", start.elapsed());
    assert!(declarations.contains("unknown"));
}

// ---- Generated tables: random JSON Schemas with odd names, refs and comments ----

/// Property names and tool names that are not identifiers, are keywords or globals.
const ODD_NAMES: &[&str] = &[
    "id",
    "a-b",
    "default",
    "class",
    "new",
    "__proto__",
    "constructor",
    "123",
    "a b",
    "ünï",
    "$x",
    "_",
    "*/",
    "",
    "Promise",
    "Record",
    "string",
    "then",
    "key",
    "x.y",
    "store",
    "arguments",
    "undefined",
    "readonly",
    "get",
];

/// Definition names, clashing with globals, keywords, each other and the providers.
const DEF_NAMES: &[&str] = &[
    "User",
    "Promise",
    "Date",
    "a-b",
    "0x",
    "string",
    "default",
    "store",
    "",
    "x/y",
    "Node",
    "T",
    "Uint8Array",
];

/// Where a generated `$ref` points: definitions that may or may not be there, the root,
/// a property, a remote document, an anchor.
const REFS: &[&str] = &[
    "#",
    "#/$defs/User",
    "#/definitions/User",
    "#/$defs/Node",
    "#/definitions/Node",
    "#/$defs/Promise",
    "#/$defs/default",
    "#/$defs/x~1y",
    "#/$defs/",
    "#/$defs/T",
    "#/$defs/Missing",
    "#/properties/a",
    "#/properties/id",
    "#/items",
    "https://example.com/s.json",
    "#anchor",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z */\\n@\"'\\\\]{0,16}",
        "\\PC{0,8}",
        Just("*/".to_owned()),
        Just("ends */ here\r\nand /* opens".to_owned())
    ]
}

fn literal() -> impl Strategy<Value = Json> {
    prop_oneof![
        text().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        (-1e6f64..1e6).prop_map(Json::from),
        any::<bool>().prop_map(Json::from),
        Just(Json::Null),
        Just(json!([1, "a"])),
        Just(json!({ "k": "v", "a-b": [] })),
    ]
}

fn leaf() -> impl Strategy<Value = Json> {
    prop_oneof![
        Just(json!(true)),
        Just(json!(false)),
        Just(json!({})),
        prop::sample::select(vec![
            "string", "number", "integer", "boolean", "null", "object", "array", "bogus"
        ])
        .prop_map(|t| json!({ "type": t })),
        Just(json!({ "type": ["string", "null"] })),
        literal().prop_map(|value| json!({ "const": value })),
        prop::collection::vec(literal(), 0..4).prop_map(|values| json!({ "enum": values })),
        prop::sample::select(REFS).prop_map(|r| json!({ "$ref": r })),
        Just(
            json!({ "type": "object", "properties": { "__executor_binary_v1__": { "type": "string" }, "data": { "type": "string" } } })
        ),
        Just(json!({ "properties": { "__executor_binary_v1__": { "const": "Float64Array" } } })),
        Just(json!({ "not": { "type": "string" } })),
        Just(json!({ "if": { "type": "string" }, "then": { "minLength": 1 } })),
        Just(json!({ "type": "object", "patternProperties": { "^x-": { "type": "string" } } })),
    ]
}

fn schemas() -> impl Strategy<Value = Json> {
    leaf().prop_recursive(5, 64, 5, |inner| {
        prop_oneof![
            (
                prop::collection::vec((prop::sample::select(ODD_NAMES), inner.clone(), any::<bool>()), 0..5),
                prop::option::of(prop_oneof![inner.clone(), any::<bool>().prop_map(Json::from)]),
                any::<bool>(),
            )
                .prop_map(|(properties, additional, typed)| {
                    let required: Vec<&str> = properties
                        .iter()
                        .filter(|(_, _, required)| *required)
                        .map(|(name, ..)| *name)
                        .collect();
                    let properties: serde_json::Map<String, Json> =
                        properties.into_iter().map(|(name, schema, _)| (name.to_owned(), schema)).collect();
                    let mut object = json!({ "properties": properties, "required": required });
                    if typed {
                        object["type"] = json!("object");
                    }
                    if let Some(additional) = additional {
                        object["additionalProperties"] = additional;
                    }
                    object
                }),
            inner.clone().prop_map(|items| json!({ "type": "array", "items": items })),
            (prop::collection::vec(inner.clone(), 0..4), any::<bool>(), prop::option::of(inner.clone()))
                .prop_map(|(items, draft_07, rest)| {
                    let mut tuple = if draft_07 {
                        json!({ "type": "array", "items": items })
                    } else {
                        json!({ "type": "array", "prefixItems": items })
                    };
                    if let Some(rest) = rest {
                        tuple[if draft_07 { "additionalItems" } else { "items" }] = rest;
                    }
                    tuple
                }),
            (
                prop::sample::select(vec!["anyOf", "oneOf", "allOf"]),
                prop::collection::vec(inner.clone(), 0..4)
            )
                .prop_map(|(keyword, members)| json!({ keyword: members })),
            inner.clone().prop_map(|schema| with(schema, "nullable", json!(true))),
            (inner.clone(), text()).prop_map(|(schema, description)| with(
                schema,
                "description",
                json!(description)
            )),
            (inner.clone(), prop::sample::select(REFS)).prop_map(|(schema, r)| with(
                schema,
                "$ref",
                json!(r)
            )),
            (inner, prop::sample::select(vec![json!(["object", "null"]), json!(["array", "string"])]))
                .prop_map(|(schema, types)| with(schema, "type", types)),
        ]
    })
}

/// `schema` with `key` set, when it is an object.
fn with(mut schema: Json, key: &str, value: Json) -> Json {
    if let Json::Object(map) = &mut schema {
        map.insert(key.to_owned(), value);
    }
    schema
}

/// A whole input or output schema: a root with definitions and maybe a title.
fn document() -> impl Strategy<Value = Json> {
    (
        schemas(),
        prop::collection::vec((prop::sample::select(DEF_NAMES), schemas()), 0..4),
        any::<bool>(),
        prop::option::of(prop::sample::select(DEF_NAMES)),
    )
        .prop_map(|(root, defs, draft_07, title)| {
            let defs: serde_json::Map<String, Json> =
                defs.into_iter().map(|(name, schema)| (name.to_owned(), schema)).collect();
            let root = with(root, if draft_07 { "definitions" } else { "$defs" }, Json::Object(defs));
            match title {
                Some(title) => with(root, "title", json!(title)),
                None => root,
            }
        })
}

fn tables() -> impl Strategy<Value = ToolTable> {
    let tool = (
        prop::sample::select(ODD_NAMES),
        text(),
        prop::option::weighted(0.8, document()),
        prop::option::weighted(0.8, document()),
    );
    (
        prop::sample::select(vec!["p", "store", "users", "Node"]),
        text(),
        any::<bool>(),
        prop::collection::vec(tool, 0..4),
    )
        .prop_map(|(name, description, positional, tools)| {
            let provider = |positional: bool| {
                tools.iter().enumerate().fold(
                    ProviderSpec::new(name).description(description.clone()).positional_args(positional),
                    |provider, (i, (tool, description, input, output))| {
                        let mut spec = ToolSpec::new(format!("{tool}{i}"), description.clone());
                        spec.input_schema = input.clone();
                        spec.output_schema = output.clone();
                        provider.tool(spec)
                    },
                )
            };
            // An options provider refuses a tool whose input is not an object: then positional.
            ToolTable::new(vec![provider(positional)])
                .or_else(|_| ToolTable::new(vec![provider(true)]))
                .expect("a positional provider of distinct tool names is a table")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn rendering_never_panics_and_leaves_nothing_unnamed(table in tables()) {
        let declarations = table.declarations();
        prop_assert!(declarations.ends_with(";\n") || declarations.ends_with("}\n"), "{declarations}");
        prop_assert!(!declarations.contains(['\u{1}', '\u{2}']), "a placeholder was left: {declarations}");
        prop_assert_eq!(table.declarations(), declarations, "rendering is deterministic");
    }
}

/// ~200 generated tables, each in a namespace of one file, for one tsc run.
fn generated_cases() -> String {
    let mut runner = TestRunner::deterministic();
    let strategy = tables();
    let mut file = String::new();
    for i in 0..200 {
        let table = strategy.new_tree(&mut runner).expect("the generator makes a table").current();
        file.push_str(&format!("namespace case{i} {{\n{}}}\n\n", table.declarations()));
    }
    file.push_str("export {};\n");
    file
}

// ---- The TypeScript compiler ----

/// Programs written against the fixtures: each must type-check.
const SHOP_PROGRAM: &str = r#"
const f = async () => {
  const u = await store.findUser("ada");
  return u.email;
};
const everything = async () => {
  const u = await store.findUser("ada", 10);
  const email: string | null | undefined = u.email;
  const city: string = u.address.city;
  const role: "admin" | "customer" = u.role;
  const avatar: Uint8Array | null | undefined = u.avatar;
  const orders = await store.listOrders("ada", 5);
  const total: number | undefined = orders[0]?.totals["EUR"];
  const status = orders[0]?.status;
  const tracking: string | undefined = status?.state === "shipped" ? status.tracking : undefined;
  const root = await store.categories();
  const names: string[] = root.children.map((child) => child.name);
  const parent: string | undefined = root.parent?.name;
  const bytes: Uint8Array = await store.upload("a.txt", new Uint8Array([1, 2]));
  const pong: unknown = await store.ping(1, "two");
  const users: User[] = await admin.listUsers();
  await admin.listUsers({ roles: ["admin"], page: 2 });
  const gone: null = await admin.deleteUser({ id: "ada" });
  return [email, city, role, avatar, total, tracking, names, parent, bytes, pong, users, gone, f];
};
"#;

const MCP_PROGRAM: &str = r#"
const issues = async () => {
  const list = await github.list_issues("rust-lang", "rust", "open", undefined, 50, true);
  const first = list[0];
  const login: string | undefined = first?.assignee?.login;
  const position: [number, number] | undefined = first?.["x-position"];
  const labels: (string | Person)[] | undefined = first?.labels;
  const found = await github.github_search("q", undefined, 1);
  const total: number | undefined = found?.total;
  const code: string | null = await github._2fa_code("ada", 123456);
  return [login, position, labels, total, code];
};
export {};
"#;

const NAMES_PROGRAM: &str = r#"
const names = async () => {
  const user: User = await users.get();
  const id: string = user.id;
  const legacy: User2 = await users.legacy();
  const login: string | undefined = legacy.login;
  const lib = await users.lib();
  const done: boolean | undefined = lib.p.done;
  const day: string = lib.d;
  const k: 1 | 2.5 | -3 | "x" | true | null = lib.k;
  // The lib's globals are still the lib's.
  const later: Promise<number> = Promise.resolve(1);
  const now: Date = new Date();
  const record: Record<string, number> = { a: 1 };
  await users.titled({ tree: { tree: {} } });
  await users.new("ada");
  await users.then_("x");
  return [id, login, done, day, k, later, now, record];
};
export {};
"#;

const COMMENTS_PROGRAM: &str = r#"
const notesProgram = async () => {
  await notes.add("text", undefined, { when: 1, tag: "a" });
  const note = await notes.add("text");
  const id: string = note.id;
  return id;
};
export {};
"#;

const UNKNOWNS_PROGRAM: &str = r#"
const oddProgram = async () => {
  const shapes = await odd.shapes();
  const json: Json | undefined = shapes.json;
  const binary: Float32Array | ArrayBuffer | undefined = shapes.binary;
  const open: string | number | undefined = shapes.open?.["anything"];
  await odd.tuple("a", "b", 1, 2, 3);
  await odd.single("x");
  const nested: string | RecursiveRootOutput[] = await odd.recursiveRoot();
  return [json, binary, open, nested];
};
export {};
"#;

/// Lines that must each fail to type-check against the shop.
const WRONG_LINES: &[&str] = &[
    r#"  await store.findUser(42);"#,
    r#"  await store.findUser();"#,
    r#"  const n: number = (await store.findUser("ada")).id;"#,
    r#"  await store.nothing();"#,
    r#"  await admin.deleteUser();"#,
    r#"  await admin.listUsers({ roles: ["root"] });"#,
    r#"  await store.upload("a.txt", [1, 2]);"#,
    r#"  await store.listOrders("ada", 5, 6);"#,
];

fn tsc_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tsc"))
}

/// The pinned TypeScript, installed from `tests/tsc/package-lock.json` on first use.
fn typescript() -> std::path::PathBuf {
    let tsc = tsc_dir().join("node_modules/typescript/bin/tsc");
    let missing = |program: &str, error: std::io::Error| -> ! {
        panic!(
            "the TypeScript check needs `{program}` ({error}): install Node.js 20 or later, with npm, and put \
             `node` and `npm` on PATH"
        )
    };
    if let Err(error) = Command::new("node").arg("--version").output() {
        missing("node", error);
    }
    if !tsc.exists() {
        let output = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(tsc_dir())
            .output()
            .unwrap_or_else(|error| missing("npm", error));
        assert!(
            output.status.success(),
            "`npm ci` in {} failed: {}",
            tsc_dir().display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    tsc
}

#[test]
fn the_typescript_compiler_accepts_the_declarations() {
    let tsc = typescript();
    let dir = std::env::temp_dir().join(format!("codemode-declarations-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = format!("export {{}};\nconst wrong = async () => {{\n{}\n}};\n", WRONG_LINES.join("\n"));
    let files: BTreeMap<&str, String> = BTreeMap::from([
        // A script, as the model reads it: `store` and `admin` are globals, also for wrong.ts.
        ("shop.ts", format!("{SHOP}{SHOP_PROGRAM}")),
        ("mcp.ts", format!("{MCP}{MCP_PROGRAM}")),
        ("names.ts", format!("{NAMES}{NAMES_PROGRAM}")),
        ("comments.ts", format!("{COMMENTS}{COMMENTS_PROGRAM}")),
        ("unknowns.ts", format!("{UNKNOWNS}{UNKNOWNS_PROGRAM}")),
        ("generated.ts", generated_cases()),
        ("wrong.ts", wrong),
    ]);
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let start = std::time::Instant::now();
    let output = Command::new("node")
        .arg(&tsc)
        .args(["--noEmit", "--strict", "--target", "es2022", "--lib", "es2022", "--pretty", "false"])
        .args(files.keys())
        .current_dir(&dir)
        .output()
        .expect("node runs tsc");
    eprintln!("tsc took {:?}", start.elapsed());
    let stdout = String::from_utf8_lossy(&output.stdout);
    // `file.ts(line,col): error TS…: message`
    let mut errors: BTreeMap<&str, Vec<(usize, &str)>> = BTreeMap::new();
    for line in stdout.lines().filter(|line| line.contains("): error TS")) {
        let (file, rest) = line.split_once('(').unwrap();
        let number = rest.split(',').next().unwrap().parse().unwrap();
        errors.entry(file).or_default().push((number, line));
    }
    let wrong_errors = errors.remove("wrong.ts").unwrap_or_default();
    let files = &files;
    let unexpected: Vec<String> = errors
        .iter()
        .flat_map(|(file, lines)| {
            lines.iter().map(move |(number, line)| {
                format!("{line}\n    at: {}", files[file].lines().nth(number - 1).unwrap_or_default())
            })
        })
        .collect();
    assert!(unexpected.is_empty(), "tsc refused the declarations or a program:\n{}", unexpected.join("\n"));
    // The wrong program fails, on each of its lines: the check is not vacuous.
    assert!(!output.status.success(), "tsc accepted a program that calls tools wrongly:\n{stdout}");
    let failing: Vec<usize> = wrong_errors.iter().map(|(number, _)| *number).collect();
    for (i, line) in WRONG_LINES.iter().enumerate() {
        assert!(failing.contains(&(i + 3)), "tsc accepted `{}`; it said:\n{stdout}", line.trim());
    }
    assert!(
        failing.iter().all(|&n| (3..3 + WRONG_LINES.len()).contains(&n)),
        "the wrong program fails elsewhere than its wrong lines:\n{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
