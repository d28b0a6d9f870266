// Command node runs a Troupe node.
//
//	node run [--data DIR] [--model auto|offline|scripted:FILE|PROVIDER[:MODEL]] "<task>"
//	node serve [--data DIR] [--http ADDR] [--model …]
//	node tools list [--json] [--config FILE]
//	node tools call [--config FILE] NAME ['JSON-ARGS' | key=value,... | -]
//	node rag add|search|ask|list|remove --kb NAME …   (rag.go: knowledge bases)
//	node memory add|search|import|consolidate|history …   (memory.go: agent memory)
//	node agents list [--json] [--config FILE] [--agents FILE]
//	node mcp [flags]
//
// run starts an embedded node in process, submits one task, prints each step as it
// happens and exits 0 when the task completes (1 when it fails, 2 on bad usage or an
// invalid task). run runs that task only: other sessions left unfinished in the data
// directory wait for serve, which resumes them.
// serve serves the HTTP API until SIGINT or SIGTERM, then shuts down gracefully.
// tools lists the default agent's tools, or calls one through the node's tool
// performer (exit 0 with the result, 1 with the error, 2 on bad usage); the config
// file's "tools" section enables http_fetch, files and notes.
// Environment: TROUPE_DATA (data directory, default ./.troupe), TROUPE_HTTP_ADDR
// (default 127.0.0.1:8080), TROUPE_MODEL; flags override them.
//
// MCP (package mcp; cmd/node/mcp.go): the config file's "mcp_servers" give the agent
// the tools of MCP servers (for run, serve and mcp). `node mcp [flags]` serves the
// agent's tools and run_task to one MCP client over stdin and stdout until the client
// closes stdin; serve also serves them over Streamable HTTP at /mcp (behind the
// API's bearer tokens when it has any, as every route of the API). Both also offer
// resources and prompts: the skills', the MCP servers', and those of the config
// file's "mcp_server" section (mcp.ServedConfig).
package main
