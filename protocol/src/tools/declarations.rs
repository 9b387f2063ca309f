//! TypeScript declarations of a tool table, for the model to read.
//!
//! [`render`] writes one `declare const <provider>: { ... };` per provider, each tool a
//! method named by its sandbox name with parameters laid out as [`Parameters`] says,
//! returning `Promise<T>` of its output schema; then the named types those methods use:
//! an `interface` for every titled root object and every `$defs`/`definitions` object
//! with properties, a `type X = ...;` for every other definition, in the order a reader
//! meets them (depth first from the providers: each type right after the first that uses it).
//!
//! The JSON Schemas are read as schemars 1 writes them (draft 2020-12) and as people
//! write them by hand (draft-07: `definitions`, `items` as an array). What TypeScript
//! cannot say (`not`, `if`/`then`, a remote `$ref`, `patternProperties`) reads as
//! `unknown`: nothing is dropped and nothing fails. The walk is bounded in depth (64
//! schemas deep) and in work (200,000 schemas), so a hostile schema gets `unknown`, not a
//! stack overflow or an endless render.
//!
//! Types are named last. While rendering, a reference to a named type is a placeholder
//! (`\u{1}<node>\u{2}`); when everything is rendered, named types of the same name that
//! render the same (up to the names of the types they reference, so recursive ones too)
//! become one, the rest get `2`, `3`… after the name, no name takes a TypeScript lib
//! global, a keyword or a provider's name, and the placeholders are filled in.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value as Json};

use super::parameter_name as tuple_parameter_name;
use super::{Parameters, ToolSpec, ToolTable, lookup, resolve, sandbox_name};
use crate::binary::{BINARY_TAG, BinaryKind};
use crate::provider::REFUSED_WORDS;

/// How deep one type may nest (schemas inside schemas) before the rest reads `unknown`.
const MAX_DEPTH: usize = 64;

/// How many schemas one rendering may visit before everything else reads `unknown`.
const FUEL: usize = 200_000;

/// The widest an inline object type may be on one line; wider, or with comments, it
/// takes a line per property.
const INLINE_WIDTH: usize = 80;

/// Opens and closes a placeholder for a named type in text still to be named.
const OPEN: char = '\u{1}';
const CLOSE: char = '\u{2}';

/// The declarations of every provider of `table`; `""` for a table without providers.
///
/// ```
/// use codemode_protocol::tools::{ProviderSpec, ToolSpec, ToolTable};
/// use serde_json::json;
///
/// let table = ToolTable::new(vec![ProviderSpec::new("store").description("The shop's data.").tool(
///     ToolSpec::new("findUser", "Find a user by id.")
///         .input_schema(json!({
///             "type": "object",
///             "properties": { "id": { "type": "string", "description": "The user's id." } },
///             "required": ["id"]
///         }))
///         .output_schema(json!({
///             "title": "User",
///             "type": "object",
///             "properties": { "id": { "type": "string" }, "email": { "type": ["string", "null"] } },
///             "required": ["id"]
///         })),
/// )])
/// .unwrap();
/// assert_eq!(
///     table.declarations(),
///     r#"/** The shop's data. */
/// declare const store: {
///   /**
///    * Find a user by id.
///    * @param id The user's id.
///    */
///   findUser(id: string): Promise<User>;
/// };
///
/// interface User {
///   id: string;
///   email?: string | null;
/// }
/// "#
/// );
/// ```
pub fn render(table: &ToolTable) -> String {
    if table.providers().is_empty() {
        return String::new();
    }
    let mut renderer = Renderer::new();
    let mut providers = Vec::with_capacity(table.providers().len());
    for (p, provider) in table.providers().iter().enumerate() {
        let mut text = jsdoc(&doc_lines(&provider.description), 0);
        text.push_str("declare const ");
        text.push_str(&provider.name);
        let mut methods = String::new();
        for (route, _, sandbox, tool) in table.tools().filter(|(route, ..)| route.provider == p) {
            methods.push_str(&renderer.method(sandbox, tool, table.parameters(route)));
        }
        if methods.is_empty() {
            text.push_str(": {};\n");
        } else {
            text.push_str(": {\n");
            text.push_str(&methods);
            text.push_str("};\n");
        }
        providers.push(text);
    }
    renderer.render_nodes();
    let provider_names: Vec<&str> = table.providers().iter().map(|p| p.name.as_str()).collect();
    renderer.finish(&providers, &provider_names)
}

/// A type being built, with enough structure to parenthesise and flatten it.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Unknown,
    Never,
    /// Needs no parentheses anywhere: a keyword, a literal, a name, `T[]`, `{ ... }`.
    Atom(String),
    /// Two or more atoms joined by `&`.
    And(Vec<String>),
    /// Two or more atoms or intersections joined by `|`.
    Or(Vec<Ty>),
}

impl Ty {
    fn atom(text: impl Into<String>) -> Ty {
        Ty::Atom(text.into())
    }

    fn text(&self) -> String {
        match self {
            Ty::Unknown => "unknown".into(),
            Ty::Never => "never".into(),
            Ty::Atom(text) => text.clone(),
            Ty::And(parts) => parts.join(" & "),
            Ty::Or(members) => members.iter().map(Ty::text).collect::<Vec<_>>().join(" | "),
        }
    }

    /// The text, parenthesised where an element type or an intersection needs it.
    fn atom_text(&self) -> String {
        match self {
            Ty::And(_) | Ty::Or(_) => format!("({})", self.text()),
            _ => self.text(),
        }
    }
}

/// `a | b | …`: flattened, without repeats; `unknown` swallows it, `never` drops out.
fn union(items: Vec<Ty>) -> Ty {
    let mut members: Vec<Ty> = Vec::new();
    for item in items {
        let flat = match item {
            Ty::Unknown => return Ty::Unknown,
            Ty::Never => Vec::new(),
            Ty::Or(inner) => inner,
            ty => vec![ty],
        };
        for ty in flat {
            if !members.contains(&ty) {
                members.push(ty);
            }
        }
    }
    match members.len() {
        0 => Ty::Never,
        1 => members.pop().unwrap_or(Ty::Never),
        _ => Ty::Or(members),
    }
}

/// `a & b & …`: flattened, without repeats; `never` swallows it, `unknown` drops out.
fn intersection(items: Vec<Ty>) -> Ty {
    let mut parts: Vec<Ty> = Vec::new();
    for item in items {
        let flat = match item {
            Ty::Never => return Ty::Never,
            Ty::Unknown => Vec::new(),
            Ty::And(inner) => inner.into_iter().map(Ty::Atom).collect(),
            ty => vec![ty],
        };
        for ty in flat {
            if !parts.contains(&ty) {
                parts.push(ty);
            }
        }
    }
    match parts.len() {
        0 => Ty::Unknown,
        1 => parts.pop().unwrap_or(Ty::Unknown),
        _ => Ty::And(parts.iter().map(Ty::atom_text).collect()),
    }
}

/// A named type: a titled root object, a root something refers to with `#`, or a
/// definition under `$defs`/`definitions`.
struct Node<'a> {
    /// The document its `$ref`s resolve in.
    root: &'a Json,
    schema: &'a Json,
    /// The name it asks for, as an identifier; it may end up with a number after it.
    base: String,
    /// `interface X { ... }` (an object with properties) or `type X = ...;`.
    interface: bool,
    /// Its JSDoc, rendered.
    doc: String,
    /// The interface's `{ ... }` or the alias's type, with placeholders.
    body: String,
}

/// Where a schema is being rendered.
#[derive(Clone, Copy)]
struct Cx<'a> {
    /// The document its `$ref`s resolve in.
    root: &'a Json,
    /// The alias whose body this is, while no object, array or tuple lies between:
    /// TypeScript refuses an alias that reaches itself through unions, intersections
    /// and other aliases only.
    alias: Option<usize>,
    depth: usize,
    /// The indent of the lines a multi-line object type here opens and closes on.
    indent: usize,
}

impl<'a> Cx<'a> {
    fn deeper(self) -> Cx<'a> {
        Cx { depth: self.depth + 1, ..self }
    }

    /// Inside an object, array or tuple: a reference there closes no alias cycle.
    fn deferred(self) -> Cx<'a> {
        Cx { alias: None, depth: self.depth + 1, ..self }
    }

    fn indented(self) -> Cx<'a> {
        Cx { indent: self.indent + 1, ..self }
    }
}

/// One member of an object type: its JSDoc lines and `key?: T`.
type Member = (Vec<String>, String);

struct Renderer<'a> {
    nodes: Vec<Node<'a>>,
    /// (the root's address, the JSON pointer) → node.
    by_key: HashMap<(usize, String), usize>,
    /// The name a root takes when `#` refers to it and it has no title, by its address.
    root_names: HashMap<usize, String>,
    /// Per node, the aliases its body names outside any object, array or tuple.
    alias_edges: Vec<Vec<usize>>,
    /// Local references being inlined, to stop at a cycle.
    inlining: Vec<(usize, String)>,
    fuel: usize,
}

fn address(json: &Json) -> usize {
    json as *const Json as usize
}

impl<'a> Renderer<'a> {
    fn new() -> Renderer<'a> {
        Renderer {
            nodes: Vec::new(),
            by_key: HashMap::new(),
            root_names: HashMap::new(),
            alias_edges: Vec::new(),
            inlining: Vec::new(),
            fuel: FUEL,
        }
    }

    /// One method of a provider with its JSDoc, indented by one.
    fn method(&mut self, sandbox: &str, tool: &'a ToolSpec, parameters: Parameters<'a>) -> String {
        let base = pascal_case(sandbox);
        if let Some(root) = &tool.input_schema {
            self.root_names.entry(address(root)).or_insert_with(|| format!("{base}Input"));
        }
        if let Some(root) = &tool.output_schema {
            self.root_names.entry(address(root)).or_insert_with(|| format!("{base}Output"));
        }
        let cx = |root: &'a Json| Cx { root, alias: None, depth: 0, indent: 1 };
        let mut params: Vec<String> = Vec::new();
        let mut docs: Vec<(String, Vec<String>)> = Vec::new();
        match parameters {
            Parameters::Named(named) => {
                let mut used = HashSet::new();
                for (i, parameter) in named.iter().enumerate() {
                    let name = parameter_name(parameter.name, &mut used);
                    let root = tool.input_schema.as_ref().unwrap_or(parameter.schema);
                    let ty = self.ty(cx(root), parameter.schema);
                    let (mark, ty) = if parameter.required {
                        ("", ty)
                    } else if named[i..].iter().all(|later| !later.required) {
                        ("?", ty)
                    } else {
                        ("", union(vec![ty, Ty::atom("undefined")]))
                    };
                    params.push(format!("{name}{mark}: {}", ty.text()));
                    docs.push((name, parameter_doc(parameter.schema)));
                }
            }
            Parameters::Tuple { items, rest } => {
                let mut used = HashSet::new();
                let root = |item| tool.input_schema.as_ref().unwrap_or(item);
                for (i, item) in items.into_iter().enumerate() {
                    let name = parameter_name(&tuple_parameter_name(item, i), &mut used);
                    let ty = self.ty(cx(root(item)), item);
                    params.push(format!("{name}: {}", ty.text()));
                    docs.push((name, parameter_doc(item)));
                }
                if let Some(rest) = rest {
                    let titled = tuple_parameter_name(rest, 0);
                    let name = parameter_name(if titled == "arg0" { "rest" } else { &titled }, &mut used);
                    let ty = self.ty(cx(root(rest)), rest);
                    params.push(format!("...{name}: {}[]", ty.atom_text()));
                    docs.push((name, parameter_doc(rest)));
                }
            }
            Parameters::Single(root) => {
                let (ty, named) = self.root_ty(cx(root));
                params.push(format!("value: {}", ty.text()));
                if !named {
                    docs.push(("value".into(), parameter_doc(root)));
                }
            }
            Parameters::None => {}
            Parameters::Options { schema, required } => {
                let (ty, named) = self.root_ty(cx(schema));
                let mark = if required { "" } else { "?" };
                params.push(format!("options{mark}: {}", ty.text()));
                if !named {
                    docs.push(("options".into(), parameter_doc(schema)));
                }
            }
            Parameters::Any => params.push("...args: unknown[]".into()),
        }
        let output = match &tool.output_schema {
            Some(root) => self.root_ty(cx(root)).0,
            None => Ty::Unknown,
        };
        let mut doc = doc_lines(&tool.description);
        if tool.needs_approval {
            doc.extend(doc_lines(crate::texts::NEEDS_APPROVAL_DOC));
        }
        for (name, lines) in docs {
            let mut lines = lines.into_iter();
            if let Some(first) = lines.next() {
                doc.push(format!("@param {name} {first}"));
                doc.extend(lines);
            }
        }
        // `new(…)` in a type literal is a construct signature, not a method.
        let name = if sandbox == "new" { "\"new\"" } else { sandbox };
        format!("{}  {name}({}): Promise<{}>;\n", jsdoc(&doc, 1), params.join(", "), output.text())
    }

    /// The type of a whole input or output schema: its interface when it is a titled
    /// object (`true` then), else the type itself.
    fn root_ty(&mut self, cx: Cx<'a>) -> (Ty, bool) {
        if let Json::Object(map) = cx.root
            && map.get("title").and_then(Json::as_str).is_some_and(|t| !t.is_empty())
            && is_plain_object(cx.root, map)
        {
            let id = self.node(cx.root, String::new(), cx.root);
            return (Ty::Atom(placeholder(id)), true);
        }
        (self.ty(cx, cx.root), false)
    }

    /// The node of the named type at `pointer` in `root`, made on first use.
    fn node(&mut self, root: &'a Json, pointer: String, schema: &'a Json) -> usize {
        let key = (address(root), pointer);
        if let Some(&id) = self.by_key.get(&key) {
            return id;
        }
        let base = if key.1.is_empty() {
            match root.get("title").and_then(Json::as_str).filter(|t| !t.is_empty()) {
                Some(title) => title.to_owned(),
                None => self.root_names.get(&key.0).cloned().unwrap_or_else(|| "Root".into()),
            }
        } else {
            key.1
                .rsplit('/')
                .next()
                .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
                .unwrap_or_default()
        };
        let interface = match schema {
            Json::Object(map) => is_plain_object(root, map),
            _ => false,
        };
        let id = self.nodes.len();
        self.nodes.push(Node {
            root,
            schema,
            base: sandbox_name(&base).into_owned(),
            interface,
            doc: String::new(),
            body: String::new(),
        });
        self.alias_edges.push(Vec::new());
        self.by_key.insert(key, id);
        id
    }

    /// Render every named type, including those that rendering them brings in.
    fn render_nodes(&mut self) {
        let mut next = 0;
        while next < self.nodes.len() {
            let (root, schema, interface) =
                (self.nodes[next].root, self.nodes[next].schema, self.nodes[next].interface);
            let body = match schema {
                Json::Object(map) if interface => {
                    let cx = Cx { root, alias: None, depth: 0, indent: 0 };
                    let members = self.members(cx.indented(), map);
                    block(&members, 0)
                }
                _ => self.ty(Cx { root, alias: Some(next), depth: 0, indent: 0 }, schema).text(),
            };
            self.nodes[next].doc = jsdoc(&schema_doc(schema), 0);
            self.nodes[next].body = body;
            next += 1;
        }
    }

    fn ty(&mut self, cx: Cx<'a>, schema: &'a Json) -> Ty {
        if self.fuel == 0 || cx.depth > MAX_DEPTH {
            return Ty::Unknown;
        }
        self.fuel -= 1;
        match schema {
            Json::Bool(false) => Ty::Never,
            Json::Object(map) => self.object_schema(cx, map),
            _ => Ty::Unknown,
        }
    }

    fn object_schema(&mut self, cx: Cx<'a>, map: &'a Map<String, Json>) -> Ty {
        if let Some(kind) = binary(cx.root, map) {
            return kind;
        }
        let mut parts = Vec::new();
        if let Some(reference) = map.get("$ref") {
            parts.push(self.reference(cx, reference));
        }
        parts.push(if let Some(value) = map.get("const") {
            literal(value, 0)
        } else if let Some(values) = map.get("enum") {
            match values {
                Json::Array(values) => union(values.iter().map(|value| literal(value, 0)).collect()),
                _ => Ty::Unknown,
            }
        } else {
            self.by_type(cx, map)
        });
        for key in ["anyOf", "oneOf"] {
            if let Some(Json::Array(members)) = map.get(key)
                && !members.is_empty()
            {
                let members = members.iter().map(|member| self.ty(cx.deeper(), member)).collect();
                parts.push(union(members));
            }
        }
        if let Some(Json::Array(members)) = map.get("allOf") {
            for member in members {
                let ty = self.ty(cx.deeper(), member);
                parts.push(ty);
            }
        }
        let ty = intersection(parts);
        if map.get("nullable") == Some(&Json::Bool(true)) { union(vec![ty, Ty::atom("null")]) } else { ty }
    }

    /// What `type` says, or what the keywords imply without it.
    fn by_type(&mut self, cx: Cx<'a>, map: &'a Map<String, Json>) -> Ty {
        let types: Vec<&str> = match map.get("type") {
            Some(Json::String(name)) => vec![name.as_str()],
            Some(Json::Array(names)) => names.iter().filter_map(Json::as_str).collect(),
            Some(_) => Vec::new(),
            None if ["properties", "additionalProperties", "patternProperties"]
                .iter()
                .any(|k| map.contains_key(*k)) =>
            {
                vec!["object"]
            }
            None if ["items", "prefixItems"].iter().any(|k| map.contains_key(*k)) => vec!["array"],
            None => Vec::new(),
        };
        if types.is_empty() {
            return Ty::Unknown;
        }
        let mut members = Vec::with_capacity(types.len());
        for name in types {
            members.push(match name {
                "string" => Ty::atom("string"),
                "number" | "integer" => Ty::atom("number"),
                "boolean" => Ty::atom("boolean"),
                "null" => Ty::atom("null"),
                "array" => self.array(cx, map),
                "object" => self.object(cx, map),
                _ => Ty::Unknown,
            });
        }
        union(members)
    }

    fn array(&mut self, cx: Cx<'a>, map: &'a Map<String, Json>) -> Ty {
        let inner = cx.deferred();
        let (prefix, rest) = match (map.get("prefixItems"), map.get("items")) {
            (Some(Json::Array(prefix)), rest) => (Some(prefix), rest),
            (_, Some(Json::Array(prefix))) => (Some(prefix), map.get("additionalItems")),
            (_, items) => (None, items),
        };
        let Some(prefix) = prefix else {
            let item = match rest {
                Some(items) => self.ty(inner, items),
                None => Ty::Unknown,
            };
            return Ty::Atom(format!("{}[]", item.atom_text()));
        };
        let mut elements = Vec::with_capacity(prefix.len() + 1);
        for item in prefix {
            elements.push(self.ty(inner, item).text());
        }
        if let Some(rest) = rest.filter(|rest| **rest != Json::Bool(false)) {
            elements.push(format!("...{}[]", self.ty(inner, rest).atom_text()));
        }
        Ty::Atom(format!("[{}]", elements.join(", ")))
    }

    fn object(&mut self, cx: Cx<'a>, map: &'a Map<String, Json>) -> Ty {
        if map.get("properties").and_then(Json::as_object).is_some_and(|p| !p.is_empty()) {
            let members = self.members(cx.indented(), map);
            return Ty::Atom(object_literal(&members, cx.indent));
        }
        match map.get("additionalProperties") {
            Some(Json::Bool(false)) => Ty::atom("Record<string, never>"),
            Some(schema @ Json::Object(_)) => {
                let value = self.ty(cx.deferred(), schema).text();
                // `Record<string, A>` inside alias A is a cycle TypeScript refuses; an
                // index signature is not.
                if cx.alias.is_some() && self.names_an_alias(&value) {
                    Ty::Atom(format!("{{ [key: string]: {value} }}"))
                } else {
                    Ty::Atom(format!("Record<string, {value}>"))
                }
            }
            _ => Ty::atom("Record<string, unknown>"),
        }
    }

    /// The members of an object with properties, at `cx`'s indent.
    fn members(&mut self, cx: Cx<'a>, map: &'a Map<String, Json>) -> Vec<Member> {
        let required: Vec<&str> = map
            .get("required")
            .and_then(Json::as_array)
            .map(|r| r.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let mut members = Vec::new();
        let mut types = Vec::new();
        let mut any_optional = false;
        if let Some(Json::Object(properties)) = map.get("properties") {
            for (name, schema) in properties {
                let ty = self.ty(cx.deferred(), schema);
                let optional = !required.contains(&name.as_str());
                any_optional |= optional;
                let mark = if optional { "?" } else { "" };
                members.push((schema_doc(schema), format!("{}{mark}: {}", property_key(name), ty.text())));
                types.push(ty);
            }
        }
        if let Some(extra @ Json::Object(_)) = map.get("additionalProperties") {
            let extra = self.ty(cx.deferred(), extra);
            if extra != Ty::Unknown {
                // Every property must fit the index signature, so it takes their types too.
                let mut all = vec![extra];
                all.extend(types);
                if any_optional {
                    all.push(Ty::atom("undefined"));
                }
                members.push((Vec::new(), format!("[key: string]: {}", union(all).text())));
            }
        }
        members
    }

    fn reference(&mut self, cx: Cx<'a>, reference: &'a Json) -> Ty {
        let Some(reference) = reference.as_str() else { return Ty::Unknown };
        let Some(pointer) = reference.strip_prefix('#') else { return Ty::Unknown };
        let Some(target) = lookup(cx.root, reference) else { return Ty::Unknown };
        if let Json::Object(map) = target
            && let Some(kind) = binary(cx.root, map)
        {
            return kind;
        }
        let mut segments = pointer.split('/');
        let definition = segments.next() == Some("")
            && matches!(segments.next(), Some("$defs" | "definitions"))
            && segments.next().is_some()
            && segments.next().is_none();
        if pointer.is_empty() || definition {
            let id = self.node(cx.root, pointer.to_owned(), target);
            if let Some(alias) = cx.alias
                && !self.nodes[id].interface
                && !self.add_edge(alias, id)
            {
                return Ty::Unknown;
            }
            return Ty::Atom(placeholder(id));
        }
        let key = (address(cx.root), pointer.to_owned());
        if self.inlining.contains(&key) {
            return Ty::Unknown;
        }
        self.inlining.push(key);
        let ty = self.ty(cx.deeper(), target);
        self.inlining.pop();
        ty
    }

    /// Record that alias `from` names alias `to` outside any object; `false` when that
    /// would close a cycle, which TypeScript refuses (the reference reads `unknown`).
    fn add_edge(&mut self, from: usize, to: usize) -> bool {
        if from == to || self.reaches(to, from) {
            return false;
        }
        if !self.alias_edges[from].contains(&to) {
            self.alias_edges[from].push(to);
        }
        true
    }

    fn reaches(&mut self, start: usize, goal: usize) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            if node == goal || self.fuel == 0 {
                return true;
            }
            self.fuel -= 1;
            if seen.insert(node) {
                stack.extend(self.alias_edges[node].iter().copied());
            }
        }
        false
    }

    fn names_an_alias(&self, text: &str) -> bool {
        placeholders(text).into_iter().any(|id| self.nodes.get(id).is_some_and(|node| !node.interface))
    }

    /// Name the named types and write everything out.
    fn finish(self, providers: &[String], provider_names: &[&str]) -> String {
        let count = self.nodes.len();
        // Classes of nodes that render the same up to the names they reference: start from
        // the text with the references blanked, split by the classes referenced until stable.
        let refs: Vec<Vec<usize>> = self
            .nodes
            .iter()
            .map(|node| placeholders(&node.body).into_iter().filter(|&r| r < count).collect())
            .collect();
        let mut classes: HashMap<String, usize> = HashMap::new();
        let mut class: Vec<usize> = self
            .nodes
            .iter()
            .map(|node| {
                let template = format!(
                    "{}\0{}\0{}\0{}",
                    node.base,
                    node.interface,
                    node.doc,
                    blank_placeholders(&node.body)
                );
                let next = classes.len();
                *classes.entry(template).or_insert(next)
            })
            .collect();
        let mut class_count = classes.len();
        loop {
            let mut split: HashMap<(usize, Vec<usize>), usize> = HashMap::new();
            let refined: Vec<usize> = (0..count)
                .map(|i| {
                    let key = (class[i], refs[i].iter().map(|&r| class[r]).collect());
                    let next = split.len();
                    *split.entry(key).or_insert(next)
                })
                .collect();
            class = refined;
            if split.len() == class_count {
                break;
            }
            class_count = split.len();
        }
        let mut taken: HashSet<String> = RESERVED_TYPE_NAMES
            .iter()
            .chain(REFUSED_WORDS.iter().map(|refused| &refused.word))
            .chain(provider_names)
            .map(|name| (*name).to_owned())
            .collect();
        // Emitted in the order a reader meets them: depth first from the providers, each
        // type before the types it uses. A node nothing reaches (a reference that read
        // `unknown` at an alias cycle) is not emitted.
        let mut names: Vec<Option<String>> = vec![None; class_count];
        let mut emitted = Vec::new();
        let mut stack: Vec<usize> =
            providers.iter().flat_map(|text| placeholders(text)).filter(|&id| id < count).collect();
        stack.reverse();
        while let Some(i) = stack.pop() {
            if names[class[i]].is_some() {
                continue;
            }
            let base = &self.nodes[i].base;
            let mut name = base.clone();
            let mut n = 2;
            while taken.contains(&name) {
                name = format!("{base}{n}");
                n += 1;
            }
            taken.insert(name.clone());
            names[class[i]] = Some(name);
            emitted.push(i);
            stack.extend(refs[i].iter().rev());
        }
        let name_of =
            |id: usize| -> &str { class.get(id).and_then(|&c| names[c].as_deref()).unwrap_or("unknown") };
        let mut out = String::new();
        for (i, provider) in providers.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            fill(&mut out, provider, name_of);
        }
        for i in emitted {
            let node = &self.nodes[i];
            out.push('\n');
            out.push_str(&node.doc);
            if node.interface {
                out.push_str("interface ");
                out.push_str(name_of(i));
                out.push(' ');
                fill(&mut out, &node.body, name_of);
                out.push('\n');
            } else {
                out.push_str("type ");
                out.push_str(name_of(i));
                out.push_str(" = ");
                fill(&mut out, &node.body, name_of);
                out.push_str(";\n");
            }
        }
        out
    }
}

/// An object an interface can say: properties, and nothing that would make it more than
/// one object type.
fn is_plain_object(root: &Json, map: &Map<String, Json>) -> bool {
    map.get("properties").and_then(Json::as_object).is_some_and(|p| !p.is_empty())
        && map.get("type").is_none_or(|t| t == "object")
        && ["$ref", "anyOf", "oneOf", "allOf", "const", "enum"].iter().all(|key| !map.contains_key(*key))
        && map.get("nullable") != Some(&Json::Bool(true))
        && binary(root, map).is_none()
}

/// The binary tag's type when `map` is the schema of one: the kinds its tag names, or
/// `Uint8Array` when it names none.
fn binary(root: &Json, map: &Map<String, Json>) -> Option<Ty> {
    let tag = map.get("properties")?.as_object()?.get(BINARY_TAG)?;
    let tag = resolve(root, tag);
    let names: Vec<&str> = match (tag.get("const"), tag.get("enum")) {
        (Some(Json::String(name)), _) => vec![name.as_str()],
        (_, Some(Json::Array(names))) => names.iter().filter_map(Json::as_str).collect(),
        _ => return Some(Ty::atom(BinaryKind::Uint8Array.name())),
    };
    // A kind the codec does not know never arrives.
    Some(union(
        names.into_iter().filter_map(BinaryKind::from_name).map(|kind| Ty::atom(kind.name())).collect(),
    ))
}

/// A JSON value as a literal type, the way `JSON.stringify` writes it.
fn literal(value: &Json, depth: usize) -> Ty {
    if depth > MAX_DEPTH {
        return Ty::Unknown;
    }
    match value {
        Json::Null => Ty::atom("null"),
        Json::Bool(b) => Ty::atom(b.to_string()),
        Json::Number(n) => match n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 1e21) {
            Some(whole) => Ty::atom(format!("{whole}")),
            None => Ty::atom(n.to_string()),
        },
        Json::String(_) => Ty::atom(value.to_string()),
        Json::Array(items) => Ty::Atom(format!(
            "[{}]",
            items.iter().map(|item| literal(item, depth + 1).text()).collect::<Vec<_>>().join(", ")
        )),
        Json::Object(map) if map.is_empty() => Ty::atom("Record<string, never>"),
        Json::Object(map) => Ty::Atom(format!(
            "{{ {} }}",
            map.iter()
                .map(|(key, value)| format!("{}: {}", property_key(key), literal(value, depth + 1).text()))
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}

fn placeholder(id: usize) -> String {
    format!("{OPEN}{id}{CLOSE}")
}

/// The node ids of the placeholders in `text`, in order.
fn placeholders(text: &str) -> Vec<usize> {
    let mut ids = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        rest = &rest[start + OPEN.len_utf8()..];
        let Some(end) = rest.find(CLOSE) else { break };
        if let Ok(id) = rest[..end].parse() {
            ids.push(id);
        }
        rest = &rest[end + CLOSE.len_utf8()..];
    }
    ids
}

/// `text` with every placeholder's id taken out.
fn blank_placeholders(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        match c {
            OPEN => {
                inside = true;
                out.push(c);
            }
            CLOSE => {
                inside = false;
                out.push(c);
            }
            _ if inside => {}
            _ => out.push(c),
        }
    }
    out
}

/// Append `text` to `out` with every placeholder replaced by its name.
fn fill<'n>(out: &mut String, text: &str, name_of: impl Fn(usize) -> &'n str) {
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        rest = &rest[start + OPEN.len_utf8()..];
        let end = rest.find(CLOSE).unwrap_or(rest.len());
        out.push_str(rest[..end].parse().map_or("unknown", &name_of));
        rest = rest.get(end + CLOSE.len_utf8()..).unwrap_or("");
    }
    out.push_str(rest);
}

/// How wide `text` reads, a placeholder counted as a name of eight characters (so the
/// layout does not hang on node ids).
fn width(text: &str) -> usize {
    let blanked = blank_placeholders(text);
    blanked.chars().count() + blanked.matches(OPEN).count() * 6
}

/// `{ a: string; b?: number }` on one line when it has no comments and fits, else a
/// line per member.
fn object_literal(members: &[Member], indent: usize) -> String {
    if members.iter().all(|(doc, text)| doc.is_empty() && !text.contains('\n')) {
        let line =
            format!("{{ {} }}", members.iter().map(|(_, text)| text.as_str()).collect::<Vec<_>>().join("; "));
        if width(&line) <= INLINE_WIDTH {
            return line;
        }
    }
    block(members, indent)
}

/// `{`, a line per member one indent deeper, `}` at `indent`.
fn block(members: &[Member], indent: usize) -> String {
    let pad = "  ".repeat(indent + 1);
    let mut out = String::from("{\n");
    for (doc, text) in members {
        out.push_str(&jsdoc(doc, indent + 1));
        out.push_str(&pad);
        out.push_str(text);
        out.push_str(";\n");
    }
    out.push_str(&"  ".repeat(indent));
    out.push('}');
    out
}

/// A property name as TypeScript takes it: bare when an identifier, else quoted.
fn property_key(name: &str) -> String {
    if is_identifier(name) { name.to_owned() } else { Json::String(name.to_owned()).to_string() }
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// A parameter name: an identifier, not a reserved word, not one taken before in `used`.
fn parameter_name(name: &str, used: &mut HashSet<String>) -> String {
    let mut base = sandbox_name(name).into_owned();
    if REFUSED_WORDS.iter().any(|refused| refused.word == base) {
        base.push('_');
    }
    let mut candidate = base.clone();
    let mut n = 2;
    while used.contains(&candidate) {
        candidate = format!("{base}{n}");
        n += 1;
    }
    used.insert(candidate.clone());
    candidate
}

/// `findUser` → `FindUser`, `list_issues` → `ListIssues`.
fn pascal_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for word in name.split(['_', '$']) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// A schema's own description (and `@deprecated`) as JSDoc lines.
fn schema_doc(schema: &Json) -> Vec<String> {
    let mut lines = schema.get("description").and_then(Json::as_str).map(doc_lines).unwrap_or_default();
    if schema.get("deprecated") == Some(&Json::Bool(true)) {
        lines.push("@deprecated".into());
    }
    lines
}

/// A parameter's description as the lines of its `@param`; deprecated, it says so first.
fn parameter_doc(schema: &Json) -> Vec<String> {
    let mut lines = schema.get("description").and_then(Json::as_str).map(doc_lines).unwrap_or_default();
    if schema.get("deprecated") == Some(&Json::Bool(true)) {
        match lines.first_mut() {
            Some(first) => first.insert_str(0, "Deprecated. "),
            None => lines.push("Deprecated.".into()),
        }
    }
    lines
}

/// Text as lines a JSDoc comment can hold: no `*/`, no control characters, no blank
/// lines at either end.
fn doc_lines(text: &str) -> Vec<String> {
    let text = text.replace("\r\n", "\n");
    let mut lines: Vec<String> = text
        .split(['\n', '\r', '\u{2028}', '\u{2029}'])
        .map(|line| {
            let line: String =
                line.chars().map(|c| if c.is_control() && c != '\t' { ' ' } else { c }).collect();
            line.trim_end().replace("*/", "*\\/")
        })
        .collect();
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let leading = lines.iter().take_while(|line| line.is_empty()).count();
    lines.drain(..leading);
    lines
}

/// `lines` as a JSDoc comment at `indent`: one line when it is one line.
fn jsdoc(lines: &[String], indent: usize) -> String {
    let pad = "  ".repeat(indent);
    match lines {
        [] => String::new(),
        [line] => format!("{pad}/** {line} */\n"),
        lines => {
            let mut out = format!("{pad}/**\n");
            for line in lines {
                if line.is_empty() {
                    out.push_str(&format!("{pad} *\n"));
                } else {
                    out.push_str(&format!("{pad} * {line}\n"));
                }
            }
            out.push_str(&format!("{pad} */\n"));
            out
        }
    }
}

/// Names no declared type may take: TypeScript's type keywords, the globals of its
/// libraries (ES5 to ESNext, which a declaration would merge into or shadow) and the
/// sandbox's web globals. [`REFUSED_WORDS`] and the providers' names are refused too.
#[rustfmt::skip]
const RESERVED_TYPE_NAMES: &[&str] = &[
    // Type keywords and contextual keywords.
    "any", "unknown", "never", "string", "number", "boolean", "symbol", "bigint", "object", "undefined",
    "void", "null", "true", "false", "this", "keyof", "typeof", "infer", "readonly", "unique", "is",
    "asserts", "intrinsic", "type", "declare", "module", "namespace", "global", "abstract", "as", "satisfies",
    "accessor", "out", "override", "require", "from", "of", "get", "set", "constructor",
    // The libraries' globals (lib.es5.d.ts to lib.esnext.*.d.ts of TypeScript 5.9).
    "AggregateError", "AggregateErrorConstructor", "Array", "ArrayBuffer", "ArrayBufferConstructor",
    "ArrayBufferLike", "ArrayBufferTypes", "ArrayBufferView", "ArrayConstructor", "ArrayIterator",
    "ArrayLike", "AsyncDisposable", "AsyncDisposableStack", "AsyncDisposableStackConstructor",
    "AsyncGenerator", "AsyncGeneratorFunction", "AsyncGeneratorFunctionConstructor", "AsyncIterable",
    "AsyncIterableIterator", "AsyncIterator", "AsyncIteratorObject", "Atomics", "Awaited", "BigInt",
    "BigInt64Array", "BigInt64ArrayConstructor", "BigIntConstructor", "BigIntToLocaleStringOptions",
    "BigUint64Array", "BigUint64ArrayConstructor", "Boolean", "BooleanConstructor", "BuiltinIteratorReturn",
    "CallableFunction", "Capitalize", "ClassAccessorDecoratorContext", "ClassAccessorDecoratorResult",
    "ClassAccessorDecoratorTarget", "ClassDecorator", "ClassDecoratorContext", "ClassFieldDecoratorContext",
    "ClassGetterDecoratorContext", "ClassMemberDecoratorContext", "ClassMethodDecoratorContext",
    "ClassSetterDecoratorContext", "ConcatArray", "ConstructorParameters", "DataView", "DataViewConstructor",
    "Date", "DateConstructor", "DecoratorContext", "DecoratorMetadata", "DecoratorMetadataObject",
    "Disposable", "DisposableStack", "DisposableStackConstructor", "Error", "ErrorConstructor",
    "ErrorOptions", "EvalError", "EvalErrorConstructor", "Exclude", "Extract", "FinalizationRegistry",
    "FinalizationRegistryConstructor", "FlatArray", "Float16Array", "Float16ArrayConstructor", "Float32Array",
    "Float32ArrayConstructor", "Float64Array", "Float64ArrayConstructor", "Function", "FunctionConstructor",
    "Generator", "GeneratorFunction", "GeneratorFunctionConstructor", "IArguments", "ImportAssertions",
    "ImportAttributes", "ImportCallOptions", "ImportMeta", "Infinity", "InstanceType", "Int16Array",
    "Int16ArrayConstructor", "Int32Array", "Int32ArrayConstructor", "Int8Array", "Int8ArrayConstructor",
    "Intl", "Iterable", "IterableIterator", "Iterator", "IteratorObject", "IteratorObjectConstructor",
    "IteratorResult", "IteratorReturnResult", "IteratorYieldResult", "JSON", "Lowercase", "Map",
    "MapConstructor", "MapIterator", "Math", "MethodDecorator", "NaN", "NewableFunction", "NoInfer",
    "NonNullable", "Number", "NumberConstructor", "Object", "ObjectConstructor", "Omit", "OmitThisParameter",
    "ParameterDecorator", "Parameters", "Partial", "Pick", "Promise", "PromiseConstructor",
    "PromiseConstructorLike", "PromiseFulfilledResult", "PromiseLike", "PromiseRejectedResult",
    "PromiseSettledResult", "PromiseWithResolvers", "PropertyDecorator", "PropertyDescriptor",
    "PropertyDescriptorMap", "PropertyKey", "Proxy", "ProxyConstructor", "ProxyHandler", "RangeError",
    "RangeErrorConstructor", "Readonly", "ReadonlyArray", "ReadonlyMap", "ReadonlySet", "ReadonlySetLike",
    "Record", "ReferenceError", "ReferenceErrorConstructor", "Reflect", "RegExp", "RegExpConstructor",
    "RegExpExecArray", "RegExpIndicesArray", "RegExpMatchArray", "RegExpStringIterator", "Required",
    "ReturnType", "Set", "SetConstructor", "SetIterator", "SharedArrayBuffer", "SharedArrayBufferConstructor",
    "String", "StringConstructor", "StringIterator", "SuppressedError", "SuppressedErrorConstructor",
    "Symbol", "SymbolConstructor", "SyntaxError", "SyntaxErrorConstructor", "TemplateStringsArray",
    "ThisParameterType", "ThisType", "TypeError", "TypeErrorConstructor", "TypedPropertyDescriptor",
    "URIError", "URIErrorConstructor", "Uint16Array", "Uint16ArrayConstructor", "Uint32Array",
    "Uint32ArrayConstructor", "Uint8Array", "Uint8ArrayConstructor", "Uint8ClampedArray",
    "Uint8ClampedArrayConstructor", "Uncapitalize", "Uppercase", "WeakKey", "WeakKeyTypes", "WeakMap",
    "WeakMapConstructor", "WeakRef", "WeakRefConstructor", "WeakSet", "WeakSetConstructor", "decodeURI",
    "decodeURIComponent", "encodeURI", "encodeURIComponent", "escape", "eval", "globalThis", "isFinite",
    "isNaN", "parseFloat", "parseInt", "unescape",
    // The sandbox's web globals, and those a reader expects beside them.
    "console", "Console", "fetch", "Headers", "HeadersInit", "Request", "RequestInit", "Response",
    "ResponseInit", "BodyInit", "URL", "URLSearchParams", "TextEncoder", "TextDecoder", "atob", "btoa",
    "structuredClone", "queueMicrotask", "setTimeout", "clearTimeout", "setInterval", "clearInterval",
    "AbortController", "AbortSignal", "Blob", "File", "FormData", "Event", "EventTarget", "DOMException",
    "ReadableStream", "WritableStream", "crypto", "Crypto", "performance",
];
