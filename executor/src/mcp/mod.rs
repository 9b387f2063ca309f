//! MCP both ways (feature `mcp`, through rmcp): an upstream MCP server's tools as a
//! provider (`upstream`), and code mode served to any MCP client (`serve`), which asks a
//! person to approve held calls through that client (`elicit`).

pub mod elicit;
pub mod serve;
pub mod upstream;
