//! The provider `db`: a real SQLite database, read-only, with BLOBs as bytes.
//!
//! Tools: `tables()`, `schema(table)`, `query(sql, ...params)`.

use std::path::Path;
use std::sync::{Arc, Mutex};

use codemode_protocol::{
    Bytes, Dispatch, Latch, ProviderDescriptor, ToolCall, ToolNotFoundError, Value, create_envelope_dispatch,
    parse_dispatch_arguments,
};
use rusqlite::types::{Value as Sql, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value as Json, json};

/// The provider's name and tools, as the model is told.
pub(crate) fn descriptor() -> ProviderDescriptor {
    ProviderDescriptor::new("db", ["tables", "schema", "query"])
}

pub(crate) struct Store {
    connection: Arc<Mutex<Connection>>,
}

impl Store {
    /// `FILE.sql` is loaded into an in-memory database; anything else is opened read-only.
    pub(crate) fn open(path: &Path) -> Result<Store, String> {
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
            Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| format!("cannot open the database {} read-only: {e}", path.display()))?
        };
        Ok(Store { connection: Arc::new(Mutex::new(connection)) })
    }

    pub(crate) fn dispatch(&self) -> impl Dispatch {
        let connection = self.connection.clone();
        create_envelope_dispatch(Latch::open(), move |call: ToolCall| {
            let answer = serve(&connection, &call);
            async move { answer }
        })
    }
}

fn serve(connection: &Mutex<Connection>, call: &ToolCall) -> Result<Json, String> {
    if call.provider != "db" {
        return Err(ToolNotFoundError::new(&call.tool).to_string());
    }
    let args = parse_dispatch_arguments(&call.args_json).map_err(|e| e.to_string())?;
    let connection = connection.lock().map_err(|_| "the database is unavailable".to_owned())?;
    match call.tool.as_str() {
        "tables" => tables(&connection),
        "schema" => match args.first() {
            Some(Value::String(table)) => schema(&connection, table),
            _ => Err("db.schema(table) takes the table's name as a string. Call db.tables() for the names."
                .to_owned()),
        },
        "query" => match args.split_first() {
            Some((Value::String(sql), params)) => query(&connection, sql, params),
            _ => Err("db.query(sql, ...params) takes an SQL string first, then its parameters.".to_owned()),
        },
        other => Err(ToolNotFoundError::new(other).to_string()),
    }
}

fn tables(connection: &Connection) -> Result<Json, String> {
    let rows = query(
        connection,
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
        &[],
    )?;
    Ok(Json::Array(
        rows.as_array().into_iter().flatten().filter_map(|row| row.get("name").cloned()).collect(),
    ))
}

fn schema(connection: &Connection, table: &str) -> Result<Json, String> {
    let mut statement = connection
        .prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1)")
        .map_err(|e| e.to_string())?;
    let columns: Vec<Json> = statement
        .query_map([table], |row| {
            Ok(json!({
                "name": row.get::<_, String>(0)?,
                "type": row.get::<_, String>(1)?,
                "notNull": row.get::<_, bool>(2)?,
                "primaryKey": row.get::<_, i64>(3)? > 0,
            }))
        })
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if columns.is_empty() {
        return Err(format!("Table \"{table}\" does not exist. Call db.tables() for the names."));
    }
    Ok(Json::Array(columns))
}

fn query(connection: &Connection, sql: &str, params: &[Value]) -> Result<Json, String> {
    let mut statement = connection.prepare(sql).map_err(|e| format!("db.query: {e}"))?;
    if !statement.readonly() {
        return Err("db.query runs read-only statements (SELECT); this one would write.".to_owned());
    }
    let params: Vec<Sql> = params.iter().map(to_sql).collect::<Result<_, _>>()?;
    let names: Vec<String> = statement.column_names().map(str::to_owned).collect();
    let mut rows =
        statement.query(rusqlite::params_from_iter(params)).map_err(|e| format!("db.query: {e}"))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(|e| format!("db.query: {e}"))? {
        let mut fields = Map::new();
        for (i, name) in names.iter().enumerate() {
            let value = row.get_ref(i).map_err(|e| e.to_string())?;
            fields.insert(name.clone(), from_sql(value));
        }
        out.push(Json::Object(fields));
    }
    Ok(Json::Array(out))
}

fn to_sql(value: &Value) -> Result<Sql, String> {
    Ok(match value {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(i64::from(*b)),
        Value::Number(n) => {
            n.as_i64().map(Sql::Integer).or_else(|| n.as_f64().map(Sql::Real)).unwrap_or(Sql::Null)
        }
        Value::String(s) => Sql::Text(s.clone()),
        Value::Binary(b) => Sql::Blob(b.as_bytes().to_vec()),
        Value::Array(_) | Value::Object(_) => {
            return Err("db.query parameters are strings, numbers, booleans, null or bytes.".to_owned());
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
