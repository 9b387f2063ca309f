//! `--spec`: a tool spec file. Providers, their tools with descriptions and JSON Schemas,
//! and where each tool's answers come from: an SQL query on the database, or a fixed result.
//!
//! ```json
//! {
//!   "database": "shop.sql",
//!   "providers": [{
//!     "name": "shop",
//!     "description": "The shop's customers.",
//!     "positionalArgs": true,
//!     "tools": [{
//!       "name": "customer",
//!       "description": "One customer by id.",
//!       "inputSchema": { "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] },
//!       "sql": "SELECT id, name FROM customers WHERE id = :id"
//!     }, {
//!       "name": "currency",
//!       "result": "EUR"
//!     }]
//!   }]
//! }
//! ```

use std::path::{Path, PathBuf};

use codemode_executor::{CallContext, Provider};
use codemode_protocol::tools::{ToolSpec, sandbox_name};
use codemode_protocol::{ProviderSpec, Value};
use serde::Deserialize;
use serde_json::Value as Json;

use crate::db::{Database, Parameters, rows};

/// A spec file as written.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SpecFile {
    /// The database SQL tools query, relative to the spec file; `--db` overrides it.
    #[serde(default)]
    database: Option<PathBuf>,
    providers: Vec<SpecProvider>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SpecProvider {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default = "positional")]
    positional_args: bool,
    tools: Vec<SpecTool>,
}

fn positional() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SpecTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    input_schema: Option<Json>,
    #[serde(default)]
    output_schema: Option<Json>,
    /// Each call waits for a person's approval (`codemode run` asks on the terminal).
    #[serde(default)]
    needs_approval: bool,
    /// Answer with the rows of this read-only statement; the arguments fill its
    /// parameters (`:name` from a named parameter or option, `?` in order).
    #[serde(default)]
    sql: Option<String>,
    /// Answer with this value, whatever the arguments.
    #[serde(default)]
    result: Option<Value>,
}

/// A loaded spec: its providers, and the database its SQL tools need, if any.
pub(crate) struct Spec {
    path: PathBuf,
    file: SpecFile,
}

impl Spec {
    pub(crate) fn load(path: &Path) -> Result<Spec, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the tool spec {}: {e}", path.display()))?;
        let file: SpecFile = serde_json::from_str(&text)
            .map_err(|e| format!("the tool spec {} does not read: {e}", path.display()))?;
        for provider in &file.providers {
            for tool in &provider.tools {
                let answers = match (&tool.sql, &tool.result) {
                    (Some(_), None) | (None, Some(_)) => continue,
                    (Some(_), Some(_)) => "both \"sql\" and \"result\"; give one",
                    (None, None) => {
                        "no answer: give it \"sql\" (a query on the database) or \"result\" (a fixed value)"
                    }
                };
                return Err(format!(
                    "the tool \"{}\" of provider \"{}\" in {} has {answers}",
                    tool.name,
                    provider.name,
                    path.display()
                ));
            }
        }
        Ok(Spec { path: path.to_owned(), file })
    }

    /// The database the spec names, relative to the spec file.
    pub(crate) fn database(&self) -> Option<PathBuf> {
        let database = self.file.database.as_ref()?;
        Some(self.path.parent().unwrap_or(Path::new(".")).join(database))
    }

    /// Whether any tool answers with SQL.
    fn needs_database(&self) -> bool {
        self.file.providers.iter().flat_map(|p| &p.tools).any(|t| t.sql.is_some())
    }

    /// The providers only, for declarations.
    pub(crate) fn specs(&self) -> Vec<ProviderSpec> {
        self.file
            .providers
            .iter()
            .map(|p| ProviderSpec {
                name: p.name.clone(),
                description: p.description.clone(),
                positional_args: p.positional_args,
                tools: p.tools.iter().map(tool_spec).collect(),
            })
            .collect()
    }

    /// The providers with their answers; SQL tools query `database`.
    pub(crate) fn providers(&self, database: Option<&Database>) -> Result<Vec<Provider>, String> {
        if self.needs_database() && database.is_none() {
            return Err(format!(
                "the tool spec {} has SQL tools but no database: add \"database\" to it or pass --db FILE",
                self.path.display()
            ));
        }
        Ok(self
            .file
            .providers
            .iter()
            .map(|p| {
                let mut provider = Provider::new(&p.name).description(&p.description);
                if !p.positional_args {
                    provider = provider.options_object();
                }
                for tool in &p.tools {
                    provider = match (&tool.sql, &tool.result, database) {
                        (Some(sql), _, Some(database)) => {
                            let (database, sql) = (database.clone(), sql.clone());
                            let name = format!("{}.{}", p.name, sandbox_name(&tool.name));
                            provider.spec_tool(tool_spec(tool), move |args: Value, cx: CallContext| {
                                let (database, sql, name) = (database.clone(), sql.clone(), name.clone());
                                async move {
                                    database.run(cx, name, move |c| rows(c, &sql, parameters(&args))).await
                                }
                            })
                        }
                        (_, Some(result), _) => {
                            let result = result.clone();
                            provider.spec_tool(tool_spec(tool), move |_: Value, _| {
                                std::future::ready(Ok::<_, String>(result.clone()))
                            })
                        }
                        _ => provider,
                    };
                }
                provider
            })
            .collect())
    }
}

fn tool_spec(tool: &SpecTool) -> ToolSpec {
    ToolSpec {
        name: tool.name.clone(),
        description: tool.description.clone(),
        input_schema: tool.input_schema.clone(),
        output_schema: tool.output_schema.clone(),
        needs_approval: tool.needs_approval,
    }
}

/// An SQL tool's arguments as statement parameters: an object by name, an array in
/// order, one value as `?1`.
fn parameters(args: &Value) -> Parameters<'_> {
    match args {
        Value::Object(object) => Parameters::Named(object),
        Value::Array(items) => Parameters::Positional(items),
        Value::Null => Parameters::Positional(&[]),
        one => Parameters::Positional(std::slice::from_ref(one)),
    }
}
