//! The provider `db`: a real SQLite database, read-only, with BLOBs as bytes, served from
//! the toolbox. The same database answers a spec file's SQL tools (`spec.rs`).
//!
//! Tools: `tables()`, `schema(table)`, `query(sql, ...params)`.

use std::borrow::Cow;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};

use codemode_executor::{CallContext, Provider};
use codemode_protocol::{Bytes, Value};
use rusqlite::types::{Value as Sql, ValueRef};
use rusqlite::{Connection, InterruptHandle, OpenFlags};
use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value as Json, json};

/// An open database; clones share the connection.
#[derive(Clone)]
pub(crate) struct Database {
    connection: Arc<Mutex<Connection>>,
    interrupt: Arc<InterruptHandle>,
}

impl Database {
    /// `FILE.sql` is loaded into an in-memory database; anything else is opened read-only
    /// and must be an SQLite database.
    pub(crate) fn open(path: &Path) -> Result<Database, String> {
        let connection = if path.extension().is_some_and(|e| e == "sql") {
            let script = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the SQL script {}: {e}", path.display()))?;
            let connection = Connection::open_in_memory().map_err(|e| e.to_string())?;
            connection
                .execute_batch(&script)
                .map_err(|e| format!("the SQL script {} does not load: {e}", path.display()))?;
            connection.pragma_update(None, "query_only", true).map_err(|e| e.to_string())?;
            connection
        } else {
            let connection = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| format!("cannot open the database {} read-only: {e}", path.display()))?;
            // Opening is lazy: read the schema now, so a file that is not a database is
            // refused here rather than at the program's first call.
            connection
                .query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))
                .map_err(|e| format!("{} is not an SQLite database: {e}", path.display()))?;
            connection
        };
        let interrupt = Arc::new(connection.get_interrupt_handle());
        Ok(Database { connection: Arc::new(Mutex::new(connection)), interrupt })
    }

    /// The provider `db` as the model is told about it (over an empty database).
    pub(crate) fn spec() -> Result<codemode_protocol::ProviderSpec, String> {
        let connection = Connection::open_in_memory().map_err(|e| e.to_string())?;
        let interrupt = Arc::new(connection.get_interrupt_handle());
        let empty = Database { connection: Arc::new(Mutex::new(connection)), interrupt };
        Ok(empty.provider().spec().clone())
    }

    /// The provider `db`: `tables()`, `schema(table)`, `query(sql, ...params)`.
    pub(crate) fn provider(&self) -> Provider {
        let (tables, schema, query) = (self.clone(), self.clone(), self.clone());
        Provider::new("db")
            .description("A read-only SQLite database. BLOB columns arrive as Uint8Array.")
            .tool("tables", "The names of the database's tables.", move |(): (), cx| {
                tables.run(cx, "db.tables", table_names)
            })
            .tool(
                "schema",
                "The columns of one table. Call db.tables() for the names.",
                move |Table { table }: Table, cx| schema.run(cx, "db.schema", move |c| columns(c, &table)),
            )
            .tool(
                "query",
                "Run one read-only SQL statement (SELECT) with its ? parameters; one object per row.",
                move |Query { sql, params }: Query, cx| {
                    query.run(cx, "db.query", move |c| rows(c, &sql, Parameters::Positional(&params)))
                },
            )
    }

    /// Run `work` on the connection off the execution's thread; the statement is
    /// interrupted when the execution ends. Failures read `tool: problem`.
    pub(crate) fn run<T, D, W>(
        &self,
        cx: CallContext,
        tool: D,
        work: W,
    ) -> impl Future<Output = Result<T, String>> + use<T, D, W>
    where
        T: Send + 'static,
        D: std::fmt::Display + Send + 'static,
        W: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let (connection, interrupt) = (self.connection.clone(), self.interrupt.clone());
        async move {
            let task = tokio::task::spawn_blocking(move || {
                let connection =
                    connection.lock().map_err(|_| Failure::Plain("the database is unavailable".into()))?;
                work(&connection)
            });
            tokio::select! {
                done = task => match done {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(Failure::Plain(text))) => Err(text),
                    Ok(Err(Failure::Sqlite(text))) => Err(format!("{tool}: {text}")),
                    Err(_) => Err(format!("{tool}: the query stopped unexpectedly")),
                },
                () = cx.cancelled() => {
                    interrupt.interrupt();
                    Err(format!("{tool}: the execution ended"))
                }
            }
        }
    }
}

/// Why a database call failed: SQLite's own message (prefixed with the tool), or a
/// sentence already written for the model.
pub(crate) enum Failure {
    Sqlite(String),
    Plain(String),
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Failure {
        Failure::Sqlite(error.to_string())
    }
}

/// `db.schema`'s parameter.
#[derive(Deserialize, schemars::JsonSchema)]
struct Table {
    /// The table's name, as db.tables() gives it.
    table: String,
}

/// One column of a table.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Column {
    name: String,
    /// The declared type, such as INTEGER or TEXT.
    #[serde(rename = "type")]
    declared_type: String,
    not_null: bool,
    primary_key: bool,
}

/// `db.query`'s parameters: the SQL, then any number of values for its `?`s.
struct Query {
    sql: String,
    params: Vec<Value>,
}

impl<'de> Deserialize<'de> for Query {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Query, D::Error> {
        struct Arguments;
        impl<'de> Visitor<'de> for Arguments {
            type Value = Query;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an SQL string, then its parameters")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Query, A::Error> {
                let sql: String =
                    seq.next_element()?.ok_or_else(|| de::Error::custom("the SQL string is missing"))?;
                let mut params = Vec::new();
                while let Some(param) = seq.next_element()? {
                    params.push(param);
                }
                Ok(Query { sql, params })
            }
        }
        deserializer.deserialize_seq(Arguments)
    }
}

impl schemars::JsonSchema for Query {
    fn schema_name() -> Cow<'static, str> {
        "Query".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "array",
            "prefixItems": [{ "type": "string", "title": "sql", "description": "One read-only SQL statement." }],
            "items": {
                "title": "params",
                "description": "A value for each ?, in order: a string, number, boolean, null or bytes."
            },
            "minItems": 1
        })
    }
}

/// Rows as the program reads them: one object per row, column name to value.
#[derive(Serialize)]
#[serde(transparent)]
pub(crate) struct Rows(Vec<Map<String, Json>>);

impl schemars::JsonSchema for Rows {
    fn schema_name() -> Cow<'static, str> {
        "Rows".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "array",
            "items": {
                "type": "object",
                "description": "One row: column name to value; a BLOB is a Uint8Array.",
                "additionalProperties": true
            }
        })
    }
}

fn table_names(connection: &Connection) -> Result<Vec<String>, Failure> {
    let mut statement = connection.prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )?;
    let names = statement.query_map([], |row| row.get::<_, String>(0))?.collect::<Result<_, _>>()?;
    Ok(names)
}

fn columns(connection: &Connection, table: &str) -> Result<Vec<Column>, Failure> {
    let mut statement =
        connection.prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1)")?;
    let columns: Vec<Column> = statement
        .query_map([table], |row| {
            Ok(Column {
                name: row.get(0)?,
                declared_type: row.get(1)?,
                not_null: row.get(2)?,
                primary_key: row.get::<_, i64>(3)? > 0,
            })
        })?
        .collect::<Result<_, _>>()?;
    if columns.is_empty() {
        return Err(Failure::Plain(format!(
            "Table \"{table}\" does not exist. Call db.tables() for the names."
        )));
    }
    Ok(columns)
}

/// Values for a statement's parameters.
pub(crate) enum Parameters<'a> {
    /// `?`, `?1`…, in order.
    Positional(&'a [Value]),
    /// `:name`, `@name`, `$name` by name; a name the object lacks is NULL.
    Named(&'a codemode_protocol::codec::Object),
}

/// Run one read-only statement; one object per row.
pub(crate) fn rows(connection: &Connection, sql: &str, parameters: Parameters<'_>) -> Result<Rows, Failure> {
    let mut statement = connection.prepare(sql)?;
    if !statement.readonly() {
        return Err(Failure::Plain(
            "db.query runs read-only statements (SELECT); this one would write.".into(),
        ));
    }
    let values: Vec<Sql> = match parameters {
        Parameters::Positional(params) => params.iter().map(to_sql).collect::<Result<_, _>>()?,
        Parameters::Named(object) => (1..=statement.parameter_count())
            .map(|i| {
                let name = statement.parameter_name(i).map(|n| n.trim_start_matches([':', '@', '$']));
                name.and_then(|n| object.get(n)).map_or(Ok(Sql::Null), to_sql)
            })
            .collect::<Result<_, _>>()?,
    };
    let names: Vec<String> = statement.column_names().map(str::to_owned).collect();
    let mut rows = statement.query(rusqlite::params_from_iter(values))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut fields = Map::new();
        for (i, name) in names.iter().enumerate() {
            fields.insert(name.clone(), from_sql(row.get_ref(i)?));
        }
        out.push(fields);
    }
    Ok(Rows(out))
}

fn to_sql(value: &Value) -> Result<Sql, Failure> {
    Ok(match value {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(i64::from(*b)),
        Value::Number(n) => {
            n.as_i64().map(Sql::Integer).or_else(|| n.as_f64().map(Sql::Real)).unwrap_or(Sql::Null)
        }
        Value::String(s) => Sql::Text(s.clone()),
        Value::Binary(b) => Sql::Blob(b.as_bytes().to_vec()),
        Value::Array(_) | Value::Object(_) => {
            return Err(Failure::Plain(
                "SQL parameters are strings, numbers, booleans, null or bytes.".to_owned(),
            ));
        }
    })
}

/// A column value as the program reads it; a BLOB arrives as a Uint8Array.
fn from_sql(value: ValueRef<'_>) -> Json {
    match value {
        ValueRef::Null => Json::Null,
        ValueRef::Integer(i) => json!(i),
        ValueRef::Real(f) => json!(f),
        ValueRef::Text(t) => Json::String(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => serde_json::to_value(Bytes::from(b)).unwrap_or(Json::Null),
    }
}
