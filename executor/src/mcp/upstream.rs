//! An upstream MCP server (a child process over stdio, or streamable HTTP) as a provider.
