//! Tools as the model is told about them: specs with JSON Schemas, their names in the
//! sandbox, the routing table, and how a call's arguments sit against the parameters.
//!
//! A [`ToolSpec`] is one tool: its name where it comes from, a description, and JSON
//! Schemas for what it takes and returns. A [`ProviderSpec`] groups tools under one
//! provider name with its argument convention. A [`ToolTable`] is a checked set of
//! providers: every tool has a sandbox name ([`sandbox_name`]) distinct within its
//! provider, the table routes a call by either name to the tool, shapes its arguments
//! ([`ToolTable::arguments`]) and renders what the model reads ([`declarations`],
//! [`code_tool()`]). All of it is pure: the toolbox that runs handlers lives in the executor.

mod arguments;
pub mod code_tool;
pub mod declarations;
mod names;

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

pub use arguments::{ArgumentsError, Parameter, Parameters, parameter_name};
pub use code_tool::{CodeTool, code_tool, terminate_tool, wait_tool};
pub use names::{RESERVED_TOOL_NAMES, sandbox_name};

use crate::provider::{ProviderDescriptor, ProviderNameError, validate_providers};
use crate::texts;

/// One tool as the model is told about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    /// The name where the tool comes from (a Rust registration, an MCP server, a spec
    /// file). The sandbox may call it by another name ([`sandbox_name`]); the tool is
    /// always called by this one.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The JSON Schema of the arguments; absent, anything goes. With positional
    /// arguments an object schema's properties are the parameters in order, a tuple
    /// schema's items are, and any other schema is one parameter; with an options
    /// object it is that object's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Json>,
    /// The JSON Schema of the result; absent, the result is `unknown` to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Json>,
    /// A person approves each call before it reaches the tool: the declarations say so,
    /// and a host holds the call until it is decided (denied where nobody can decide).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_approval: bool,
}

impl ToolSpec {
    /// A tool `name` with `description` and no schemas.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: None,
            output_schema: None,
            needs_approval: false,
        }
    }

    /// Marked as needing a person's approval for each call ([`ToolSpec::needs_approval`]).
    pub fn needing_approval(mut self) -> ToolSpec {
        self.needs_approval = true;
        self
    }

    /// With the JSON Schema of its arguments.
    pub fn input_schema(mut self, schema: Json) -> ToolSpec {
        self.input_schema = Some(schema);
        self
    }

    /// With the JSON Schema of its result.
    pub fn output_schema(mut self, schema: Json) -> ToolSpec {
        self.output_schema = Some(schema);
        self
    }
}

/// One provider as the model is told about it: a name in the sandbox and its tools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderSpec {
    /// The provider's name in the sandbox; it passes the guide's provider-name rules.
    pub name: String,
    /// What the provider is, for the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `true` (the default): a call sends its arguments as an array. `false`: one options object.
    #[serde(default = "positional_default", skip_serializing_if = "is_positional_default")]
    pub positional_args: bool,
    /// Its tools, in the order the model reads them.
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
}

fn positional_default() -> bool {
    true
}

fn is_positional_default(positional: &bool) -> bool {
    *positional
}

impl ProviderSpec {
    /// A provider `name` with positional arguments and no tools yet.
    pub fn new(name: impl Into<String>) -> ProviderSpec {
        ProviderSpec {
            name: name.into(),
            description: String::new(),
            positional_args: true,
            tools: Vec::new(),
        }
    }

    /// With a description for the model.
    pub fn description(mut self, description: impl Into<String>) -> ProviderSpec {
        self.description = description.into();
        self
    }

    /// Pick the argument convention: `false` sends one options object.
    pub fn positional_args(mut self, positional: bool) -> ProviderSpec {
        self.positional_args = positional;
        self
    }

    /// With one more tool.
    pub fn tool(mut self, tool: ToolSpec) -> ProviderSpec {
        self.tools.push(tool);
        self
    }
}

/// Where a call goes: a tool of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// The provider's index in the table.
    pub provider: usize,
    /// The tool's index in its provider.
    pub tool: usize,
}

/// A checked set of providers and their tools: names, routes, parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolTable {
    providers: Vec<ProviderSpec>,
    /// Per provider, per tool: the name in the sandbox.
    sandbox_names: Vec<Vec<String>>,
    routes: HashMap<(String, String), Route>,
}

impl ToolTable {
    /// Check `providers` and build the table.
    ///
    /// Refused: a provider name that breaks the guide's rules (its text), a tool with
    /// an empty name or declared twice, two tools whose names become the same sandbox
    /// name, and a tool of an options-object provider whose input schema is not an object.
    pub fn new(providers: Vec<ProviderSpec>) -> Result<ToolTable, ToolTableError> {
        let descriptors: Vec<ProviderDescriptor> =
            providers.iter().map(|p| ProviderDescriptor::new(&p.name, Vec::<String>::new())).collect();
        validate_providers(&descriptors).map_err(ToolTableError::ProviderName)?;
        let mut routes = HashMap::new();
        let mut sandbox_names = Vec::with_capacity(providers.len());
        for (p, provider) in providers.iter().enumerate() {
            let mut names: Vec<String> = Vec::with_capacity(provider.tools.len());
            let mut by_sandbox_name: HashMap<String, &str> = HashMap::new();
            for (t, tool) in provider.tools.iter().enumerate() {
                let error = |text: String| Err(ToolTableError::Tool(text));
                if tool.name.is_empty() {
                    return error(texts::TOOL_NAME_EMPTY.fill(&[&provider.name]));
                }
                if provider.tools[..t].iter().any(|earlier| earlier.name == tool.name) {
                    return error(texts::TOOL_DECLARED_TWICE.fill(&[&tool.name, &provider.name]));
                }
                let sandbox = sandbox_name(&tool.name).into_owned();
                if let Some(first) = by_sandbox_name.get(&sandbox) {
                    return error(texts::TOOL_NAMES_COLLIDE.fill(&[
                        first,
                        &tool.name,
                        &provider.name,
                        &sandbox,
                    ]));
                }
                if !provider.positional_args && !arguments::takes_object(tool.input_schema.as_ref()) {
                    return error(texts::TOOL_OPTIONS_NOT_OBJECT.fill(&[&provider.name, &tool.name]));
                }
                let route = Route { provider: p, tool: t };
                routes.insert((provider.name.clone(), sandbox.clone()), route);
                routes.insert((provider.name.clone(), tool.name.clone()), route);
                by_sandbox_name.insert(sandbox.clone(), &tool.name);
                names.push(sandbox);
            }
            sandbox_names.push(names);
        }
        Ok(ToolTable { providers, sandbox_names, routes })
    }

    /// The providers, as given.
    pub fn providers(&self) -> &[ProviderSpec] {
        &self.providers
    }

    /// The tool at `route`.
    pub fn tool(&self, route: Route) -> &ToolSpec {
        &self.providers[route.provider].tools[route.tool]
    }

    /// The provider at `route`.
    pub fn provider(&self, route: Route) -> &ProviderSpec {
        &self.providers[route.provider]
    }

    /// The name the tool at `route` takes in the sandbox.
    pub fn sandbox_name(&self, route: Route) -> &str {
        &self.sandbox_names[route.provider][route.tool]
    }

    /// Every tool: its route, its provider, its sandbox name and its spec, in order.
    pub fn tools(&self) -> impl Iterator<Item = (Route, &ProviderSpec, &str, &ToolSpec)> {
        self.providers.iter().enumerate().flat_map(move |(p, provider)| {
            provider.tools.iter().enumerate().map(move |(t, tool)| {
                (Route { provider: p, tool: t }, provider, self.sandbox_names[p][t].as_str(), tool)
            })
        })
    }

    /// Where a call of `provider.tool` goes: the tool called by its sandbox name or its
    /// own name; `None` for anything else (refuse it with `Tool "<tool>" not found`).
    pub fn route(&self, provider: &str, tool: &str) -> Option<Route> {
        // One lookup without allocating a key pair per call would need a borrowed-key
        // map; calls are few against the work a tool does.
        self.routes.get(&(provider.to_owned(), tool.to_owned())).copied()
    }

    /// The descriptors the request declares: each provider with its tools' sandbox names.
    pub fn descriptors(&self) -> Vec<ProviderDescriptor> {
        self.providers
            .iter()
            .zip(&self.sandbox_names)
            .map(|(provider, names)| {
                ProviderDescriptor::new(&provider.name, names.iter().cloned())
                    .positional_args(provider.positional_args)
            })
            .collect()
    }

    /// How the arguments of the tool at `route` sit in a call.
    pub fn parameters(&self, route: Route) -> Parameters<'_> {
        Parameters::of(self.tool(route), self.provider(route).positional_args)
    }

    /// The TypeScript declarations of every provider ([`declarations::render`]).
    pub fn declarations(&self) -> String {
        declarations::render(self)
    }

    /// Every provider with its tools and their JSON Schemas, for a model that reads
    /// schemas rather than TypeScript: `{"providers": [ProviderSpec…]}` with each tool's
    /// `name` its sandbox name and `originalName` where that differs.
    pub fn json_schemas(&self) -> Json {
        let providers: Vec<Json> = self
            .providers
            .iter()
            .zip(&self.sandbox_names)
            .map(|(provider, names)| {
                let tools: Vec<Json> = provider
                    .tools
                    .iter()
                    .zip(names)
                    .map(|(tool, sandbox)| {
                        let mut entry = serde_json::Map::new();
                        entry.insert("name".into(), Json::String(sandbox.clone()));
                        if *sandbox != tool.name {
                            entry.insert("originalName".into(), Json::String(tool.name.clone()));
                        }
                        if !tool.description.is_empty() {
                            entry.insert("description".into(), Json::String(tool.description.clone()));
                        }
                        if let Some(schema) = &tool.input_schema {
                            entry.insert("inputSchema".into(), schema.clone());
                        }
                        if let Some(schema) = &tool.output_schema {
                            entry.insert("outputSchema".into(), schema.clone());
                        }
                        Json::Object(entry)
                    })
                    .collect();
                let mut entry = serde_json::Map::new();
                entry.insert("name".into(), Json::String(provider.name.clone()));
                if !provider.description.is_empty() {
                    entry.insert("description".into(), Json::String(provider.description.clone()));
                }
                entry.insert("positionalArgs".into(), Json::Bool(provider.positional_args));
                entry.insert("tools".into(), Json::Array(tools));
                Json::Object(entry)
            })
            .collect();
        serde_json::json!({ "providers": providers })
    }

    /// The tool an agent offers the model, with these declarations in its description.
    pub fn code_tool(&self) -> CodeTool {
        code_tool(self)
    }
}

/// A set of providers the table refuses; its Display says what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolTableError {
    /// A provider name broke one of the guide's rules.
    ProviderName(ProviderNameError),
    /// A tool's name or schema cannot be served as declared.
    Tool(String),
}

impl fmt::Display for ToolTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolTableError::ProviderName(error) => error.fmt(f),
            ToolTableError::Tool(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for ToolTableError {}

/// Follow local `$ref`s (`#/$defs/Name`, `#/definitions/Name`, or `#`) from `schema`
/// within `root`, a bounded number of times; an unresolvable one stays as it is.
pub(crate) fn resolve<'a>(root: &'a Json, mut schema: &'a Json) -> &'a Json {
    for _ in 0..32 {
        let Some(reference) = schema.get("$ref").and_then(Json::as_str) else { return schema };
        match lookup(root, reference) {
            Some(target) => schema = target,
            None => return schema,
        }
    }
    schema
}

/// The schema a local `$ref` names within `root`.
pub(crate) fn lookup<'a>(root: &'a Json, reference: &str) -> Option<&'a Json> {
    if reference == "#" {
        return Some(root);
    }
    let pointer = reference.strip_prefix('#')?;
    root.pointer(pointer)
}
