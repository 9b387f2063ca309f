//! Code mode served to any MCP client: one tool, `execute`, whose description carries the declarations.
