//! How a call's arguments sit against a tool's parameters, and turning them into the
//! value the tool takes (typed, with a text naming what did not fit).

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use super::{ToolSpec, ToolTable, resolve};
use crate::texts;

/// One named parameter of a positional tool: a property of its input schema.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Parameter<'a> {
    /// The property's name.
    pub name: &'a str,
    /// The property's schema (a `$ref` left as it is).
    pub schema: &'a Json,
    /// Whether the schema requires it.
    pub required: bool,
}

/// How a tool's arguments sit in a call, read from its input schema and its provider's
/// argument convention.
#[derive(Clone, Debug, PartialEq)]
pub enum Parameters<'a> {
    /// Positional, one parameter per property of an object schema, in the schema's order:
    /// `findUser("ada", 10)` is `{"id": "ada", "limit": 10}` for the tool. (A tool that
    /// takes one object as its first argument says so with a one-item tuple.)
    Named(Vec<Parameter<'a>>),
    /// Positional, one parameter per item of a tuple schema (`prefixItems`, or draft 7's
    /// `items` array), and the rest parameter when the schema allows more items (`items`
    /// beside `prefixItems`, `additionalItems` beside an `items` array). An item's
    /// `title`, when it is an identifier, names the parameter.
    Tuple {
        /// The fixed parameters' schemas.
        items: Vec<&'a Json>,
        /// The schema of each further argument, when any number may follow.
        rest: Option<&'a Json>,
    },
    /// Positional, one parameter of any other schema.
    Single(&'a Json),
    /// No parameters: the schema is `{"type": "null"}` (what Rust's `()` gives).
    None,
    /// One options object: `required` when the schema requires any of its properties.
    Options {
        /// The object's schema.
        schema: &'a Json,
        /// Whether a call must pass it.
        required: bool,
    },
    /// No input schema: any arguments, as an array (positional) or one object.
    Any,
}

impl<'a> Parameters<'a> {
    /// The parameters of `tool` under a provider with `positional` arguments.
    pub fn of(tool: &'a ToolSpec, positional: bool) -> Parameters<'a> {
        let Some(root) = tool.input_schema.as_ref() else { return Parameters::Any };
        let schema = resolve(root, root);
        if is_null_type(schema) {
            return Parameters::None;
        }
        if !positional {
            let required = schema.get("required").and_then(Json::as_array).is_some_and(|r| !r.is_empty());
            return Parameters::Options { schema: root, required };
        }
        let tuple = match (schema.get("prefixItems"), schema.get("items")) {
            (Some(Json::Array(items)), rest) => Some((items, rest)),
            (None, Some(Json::Array(items))) => Some((items, schema.get("additionalItems"))),
            _ => None,
        };
        if let Some((items, rest)) = tuple {
            // An absent `items` admits more items too, but schemars writes tuples with
            // `maxItems` instead of `items: false`: read the bound.
            let bounded =
                schema.get("maxItems").and_then(Json::as_u64).is_some_and(|max| max as usize <= items.len());
            let rest = match rest {
                Some(Json::Bool(false)) => None,
                _ if bounded => None,
                Some(rest) => Some(rest),
                None => None,
            };
            return Parameters::Tuple { items: items.iter().collect(), rest };
        }
        if let Some(properties) = schema.get("properties").and_then(Json::as_object) {
            // Bytes are one object, never parameters.
            let binary = properties.contains_key(crate::BINARY_TAG);
            if !binary && (type_is(schema, "object") || schema.get("type").is_none()) {
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Json::as_array)
                    .map(|r| r.iter().filter_map(Json::as_str).collect())
                    .unwrap_or_default();
                return Parameters::Named(
                    properties
                        .iter()
                        .map(|(name, schema)| Parameter {
                            name,
                            schema,
                            required: required.contains(&name.as_str()),
                        })
                        .collect(),
                );
            }
        }
        Parameters::Single(root)
    }

    /// The most arguments a positional call may pass; `None` when any number may.
    pub fn most(&self) -> Option<usize> {
        match self {
            Parameters::Named(named) => Some(named.len()),
            Parameters::Tuple { rest: Some(_), .. } => None,
            Parameters::Tuple { items, rest: None } => Some(items.len()),
            Parameters::Single(_) => Some(1),
            Parameters::None => Some(0),
            Parameters::Options { .. } | Parameters::Any => None,
        }
    }
}

fn type_is(schema: &Json, name: &str) -> bool {
    match schema.get("type") {
        Some(Json::String(t)) => t == name,
        Some(Json::Array(types)) => types.iter().any(|t| t == name),
        _ => false,
    }
}

fn is_null_type(schema: &Json) -> bool {
    schema.get("type") == Some(&Json::String("null".into())) || schema.get("const") == Some(&Json::Null)
}

/// Whether an options object can fit `schema`: no schema, or one that admits an object.
pub(super) fn takes_object(schema: Option<&Json>) -> bool {
    let Some(root) = schema else { return true };
    let schema = resolve(root, root);
    match schema.get("type") {
        None => true,
        Some(_) => type_is(schema, "object") || is_null_type(schema),
    }
}

/// Arguments that do not fit a tool; its Display is the text the program catches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgumentsError {
    message: String,
}

impl ArgumentsError {
    /// The text, as the program reads it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ArgumentsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ArgumentsError {}

impl ToolTable {
    /// The arguments of a call of the tool at `route`, as the one JSON value the tool
    /// takes: a positional call's array laid onto named parameters as an object, one
    /// parameter as itself, none as `null`, a tuple as an array; an options object as it
    /// came. Too many arguments is refused with a text naming the parameters.
    pub fn arguments_json(&self, route: super::Route, args_json: &str) -> Result<Json, ArgumentsError> {
        let call = CallName { table: self, route };
        let args: Json = crate::codec::from_json_str(args_json)
            .map_err(|error| call.error(texts::TOOL_ARGUMENTS_NOT_JSON, &[&error.to_string()]))?;
        let parameters = self.parameters(route);
        let mut list = match args {
            Json::Array(list) => list,
            // An options call of a tool without parameters: `{}` is no options.
            Json::Object(options) if parameters == Parameters::None => {
                options.into_iter().map(|(_, value)| value).collect()
            }
            args => return Ok(args),
        };
        // `f(a, undefined)` arrives as `[a, null]`: a trailing hole is no argument.
        while list.last() == Some(&Json::Null) {
            list.pop();
        }
        if let Some(most) = parameters.most()
            && list.len() > most
        {
            return Err(ArgumentsError {
                message: texts::TOOL_TOO_MANY_ARGUMENTS.fill(&[
                    &call.signature(&parameters),
                    &match most {
                        0 => "no arguments".to_owned(),
                        1 => "at most 1 argument".to_owned(),
                        n => format!("at most {n} arguments"),
                    },
                    &list.len().to_string(),
                ]),
            });
        }
        Ok(match parameters {
            Parameters::Named(named) => Json::Object(
                named
                    .iter()
                    .zip(list)
                    .filter(|(_, value)| !value.is_null())
                    .map(|(parameter, value)| (parameter.name.to_owned(), value))
                    .collect(),
            ),
            Parameters::Tuple { items, .. } => {
                if list.len() < items.len() {
                    list.resize(items.len(), Json::Null);
                }
                Json::Array(list)
            }
            Parameters::Single(_) => list.into_iter().next().unwrap_or(Json::Null),
            Parameters::None => Json::Null,
            Parameters::Options { .. } | Parameters::Any => Json::Array(list),
        })
    }

    /// [`ToolTable::arguments_json`], then typed as `T`: what did not fit is named by
    /// its path (`filters.status`) and what was expected there.
    pub fn arguments<T: DeserializeOwned>(
        &self,
        route: super::Route,
        args_json: &str,
    ) -> Result<T, ArgumentsError> {
        let value = self.arguments_json(route, args_json)?;
        let call = CallName { table: self, route };
        serde_path_to_error::deserialize(value).map_err(|error| {
            let path = error.path().to_string();
            let problem = error.into_inner().to_string();
            if path == "." {
                call.error(texts::TOOL_ARGUMENTS_DO_NOT_FIT, &[&problem])
            } else {
                call.error(texts::TOOL_ARGUMENT_DOES_NOT_FIT, &[&path, &problem])
            }
        })
    }
}

/// The name of the tuple parameter at `index`: its schema's `title` when that is an
/// identifier, else `arg<index>`.
pub fn parameter_name(item: &Json, index: usize) -> String {
    match item.get("title").and_then(Json::as_str) {
        Some(title) if crate::tools::sandbox_name(title) == title => title.to_owned(),
        _ => format!("arg{index}"),
    }
}

/// `provider.tool` of one route, for texts.
struct CallName<'a> {
    table: &'a ToolTable,
    route: super::Route,
}

impl CallName<'_> {
    fn name(&self) -> String {
        format!("{}.{}", self.table.provider(self.route).name, self.table.sandbox_name(self.route))
    }

    /// `store.findUser(id, limit)`.
    fn signature(&self, parameters: &Parameters<'_>) -> String {
        let names: Vec<String> = match parameters {
            Parameters::Named(named) => named.iter().map(|p| p.name.to_owned()).collect(),
            Parameters::Tuple { items, rest } => {
                let mut names: Vec<String> =
                    items.iter().enumerate().map(|(i, item)| parameter_name(item, i)).collect();
                if let Some(rest) = rest {
                    let titled = parameter_name(rest, 0);
                    names.push(format!("...{}", if titled == "arg0" { "rest" } else { &titled }));
                }
                names
            }
            Parameters::Single(_) => vec!["value".to_owned()],
            Parameters::None => Vec::new(),
            Parameters::Options { .. } => vec!["options".to_owned()],
            Parameters::Any => vec!["...args".to_owned()],
        };
        format!("{}({})", self.name(), names.join(", "))
    }

    /// `template` filled with the call's name, then `rest`.
    fn error(&self, template: texts::Template, rest: &[&str]) -> ArgumentsError {
        let name = self.name();
        let mut values = vec![name.as_str()];
        values.extend_from_slice(rest);
        ArgumentsError { message: template.fill(&values) }
    }
}
