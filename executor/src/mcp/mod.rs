//! MCP both ways (feature `mcp`, through rmcp): an upstream MCP server's tools as a
//! provider (`upstream`), and code mode served to any MCP client (`serve`).

pub mod serve;
pub mod upstream;
