//! `codemode search` and `codemode describe`: progressive discovery over the providers of
//! a catalog file, a tool spec file, the database and (with `mcp`) upstream MCP servers.

use std::path::PathBuf;

use codemode_protocol::discovery::{Catalog, CatalogIndex, CatalogProvider, SearchRequest};

/// Where the catalog's providers come from; at least one must be given.
#[derive(clap::Args)]
pub(crate) struct CatalogArgs {
    /// A catalog file: {"providers": [{name, description, tools: [MCP tools/list entries]}]}.
    #[arg(long, value_name = "FILE.json")]
    catalog: Option<PathBuf>,
    /// The providers of a tool spec file (as `run --spec`).
    #[arg(long, value_name = "SPEC.json")]
    spec: Option<PathBuf>,
    /// Include the provider `db` (tables, schema, query).
    #[arg(long)]
    db: bool,
    /// An upstream MCP server's tools as the provider NAME (as `mcp --server`).
    #[cfg(feature = "mcp")]
    #[arg(long = "server", value_name = "NAME=COMMAND ARGS...|NAME=URL")]
    servers: Vec<String>,
    /// How the answer is printed [default: json when stdout is not a terminal, human when it is].
    #[arg(long, value_enum, value_name = "FORMAT")]
    output: Option<crate::watch::Output>,
}

pub(crate) const SEARCH_AFTER_HELP: &str = "\
The ranking is pinned (docs/discovery.md): words are split at camelCase and snake_case,
plurals folded, a one-letter typo in a word of 6 letters or more still matches.

Exit status:
  0  the answer is on stdout
  2  bad usage, no providers, an unknown --provider, or a file that does not read

Examples:
  codemode search \"open a pull request\" --catalog tools.json
  codemode search refund --catalog tools.json --provider stripe --limit 3 --output json
  codemode search \"top customers\" --db --spec shop.spec.json";

pub(crate) const DESCRIBE_AFTER_HELP: &str = "\
Exit status:
  0  the tool's declaration and schemas are on stdout
  2  bad usage, no providers, a file that does not read, or an unknown path (stderr names
     the nearest paths)

Examples:
  codemode describe github.create_pull_request --catalog tools.json
  codemode describe db.query --db --output json";

impl CatalogArgs {
    /// The index of every provider given; an error when none is.
    fn index(&self) -> Result<CatalogIndex, String> {
        let mut providers: Vec<CatalogProvider> = Vec::new();
        if let Some(path) = &self.catalog {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the catalog {}: {e}", path.display()))?;
            let catalog: Catalog = serde_json::from_str(&text).map_err(|e| {
                format!("the catalog {} does not read: {e} (write {{\"providers\": [...]}})", path.display())
            })?;
            providers.extend(catalog.providers);
        }
        if self.db {
            providers.push(CatalogProvider::from(&crate::db::Database::spec()?));
        }
        if let Some(path) = &self.spec {
            providers.extend(crate::spec::Spec::load(path)?.specs().iter().map(CatalogProvider::from));
        }
        #[cfg(feature = "mcp")]
        providers.extend(crate::mcp::upstream_specs(&self.servers)?.iter().map(CatalogProvider::from));
        if providers.is_empty() {
            return Err("give --catalog, --spec, --db or --server: there are no tools to search".to_owned());
        }
        Ok(CatalogIndex::new(Catalog { providers }))
    }

    fn json(&self) -> bool {
        use std::io::IsTerminal;
        match self.output {
            Some(crate::watch::Output::Json) => true,
            Some(crate::watch::Output::Human) => false,
            None => !std::io::stdout().is_terminal(),
        }
    }
}

/// `codemode search`: the answer as one JSON object, or as text.
pub(crate) fn search(
    query: String,
    provider: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    args: &CatalogArgs,
) -> Result<String, String> {
    let index = args.index()?;
    let answer =
        index.search(&SearchRequest { query, provider, limit, offset }).map_err(|e| e.to_string())?;
    if args.json() { serde_json::to_string(&answer).map_err(|e| e.to_string()) } else { Ok(answer.text()) }
}

/// `codemode describe`: the tool as one JSON object, or its declaration as text.
pub(crate) fn describe(path: &str, args: &CatalogArgs) -> Result<String, String> {
    let index = args.index()?;
    let described = index.describe(path).map_err(|e| e.to_string())?;
    if args.json() {
        serde_json::to_string_pretty(&described).map_err(|e| e.to_string())
    } else {
        Ok(described.text())
    }
}
