//! The human-plus command: a demo, a probe for real surfaces, an MCP bridge and the toolset.
