// Package mcp connects Troupe to the Model Context Protocol, both ways, through the
// official Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// # Client: MCP servers' tools in the node's catalog
//
// Client connects to the servers of the node's configuration ("mcp_servers":
// ServerConfig, a command spoken to over stdio or a Streamable HTTP URL with
// headers; or, in Go, a go-sdk server in the same process reached over in-memory
// transports: ServerConfig.Transport, InProcess) and offers what they have as tools (tools.Tool, each with Source()
// "mcp:<server>"):
//
//   - each tool of the server, named "<server>__<tool>" (characters a model API
//     refuses become '_'; a name past 64 characters is cut and ends with a hash),
//     with the server's description and input schema (canonical: sorted keys,
//     compact, "type":"object" added when absent);
//   - "<server>__read_resource" {"uri"} and "<server>__list_resources" {} when the
//     server has resources (the description of read_resource lists them, up to
//     2 KiB); "<server>__get_prompt" {"name", "arguments"} when it has prompts (its
//     description lists them with their arguments). Resources and prompts are tools
//     rather than context items so that the model asks for the ones it needs.
//
// Per-server "allow" and "deny" lists (path.Match globs over the server's own tool
// names, and read_resource, list_resources, get_prompt) choose the tools. A tool
// whose schema is not a JSON Schema object, or larger than 64 KiB, is left out and
// reported (ServerStatus.Skipped, and the log); descriptions are cut at 2 KiB and a
// result at ClientConfig.MaxResultBytes (the model gets the head and a note saying
// how much was cut; the tools say that limit as their tools.Limits, so a session
// does not cut the result again). Images, audio and binary resources are
// described, not passed. A model's arguments are read for the tool's schema by a
// tools.ArgumentParser, as a built-in's are (key=value pairs, coercion, duplicate
// keys and wrong types refused before the call goes out); a tool whose schema the
// parser refuses is left out and reported, as tools.NewRegistry refuses one.
//
// A tool call carries its idempotency key in the request's _meta, under
// "troupe/idempotency_key" (IdempotencyKeyMeta), so a server with side effects can
// perform them once per key: the call's name outside the log (tools.Call.OutwardKey),
// the same when the call is performed again and unique across event logs, so that
// two deployments' calls of one session name and seq are two calls. Calls reach the client through the node's one effect
// path: the session records the request, actors.LocalEffects performs it with the
// tool timeout, concurrency bound, cancellation (the request to the server is
// cancelled, and the SDK tells the server) and panic recovery of every tool, and the
// session records the answer.
//
// The node's tools.Registry is immutable and built at start; the servers' tools are
// not, so Client is an actors.ToolCatalog that the node reads where it needs it: the
// agent reads it at each model request (merged with the registry's tools, sorted by
// name, or disclosed by group or search with the rest, package tools/disclosure: the
// tool section stays byte-identical from step to step until a server's tools
// change), LocalEffects looks a tool up at each call, and a tool chain's step that
// names a server's tool ("<server>__<tool>", which Client.Owns for a configured
// server) looks it up when it runs (tools.ChainCatalog). A server's tools
// change when it connects and when it sends notifications/tools/list_changed (or the
// resources' or prompts' list_changed): the client lists them again (at most once
// per ClientConfig.RelistInterval, 1 s: the notifications of a server that sends
// them without pause are followed by one listing at the interval's end), rebuilds
// the catalog, and closes the channel of Changed, which the MCP server below follows.
// A tool call during which a stdio server sent one, or an HTTP server sent one on
// the call's own event stream (read before the answer after it), returns once that
// listing has ended, so the agent's next request offers the tools the call added.
//
// A server that is down at start, whose process died, or whose HTTP endpoint went
// away, is reconnected with backoff (ClientConfig.MinBackoff doubling up to
// MaxBackoff); Status reports each server's state, last error, connection count,
// tools and the tools left out (StatusHandler serves it as JSON: the node's GET
// /v1/mcp/servers). The tools of a server that was connected stay in the catalog while it
// reconnects (its restart does not change the prompt); a call to one waits up to
// CallWait for the server, and a call that finds the connection broken reconnects
// and is sent once more with the same key. No server stops the node: one that hangs
// is cut off by ConnectTimeout and the tool timeout, and its calls fail with errors
// that name the server and the cause.
//
// A Streamable HTTP server is reached with the headers of its configuration, or with
// OAuth 2.1 (ServerConfig.OAuth, OAuthConfig): the go-sdk's
// auth.AuthorizationCodeHandler, one per server so that its tokens (in memory,
// refreshed) outlive a reconnection, does the discovery, registration, PKCE, token
// exchange and step-up; the node's own part is the headless authorization step,
// which follows the authorization server's redirects to the configured redirect URL
// and takes the code from it, and fails with ErrAuthorizationNeedsPerson, naming the
// server, when a person would have to log in or consent. The tokens it obtains, and
// a dynamic registration's client secret, are registered with ClientConfig.Redactor
// as they are issued and refreshed, before any is sent. ServerConfig.Elicitation
// decides how a server's elicitation/create is answered: declined (the default, no
// capability advertised), or with the form's schema defaults when every required
// field has one (ElicitDefaults, SEP-1034).
//
// # Server: the node's catalog and agent over MCP
//
// NewServer serves a node (Node: its tools, a tool caller, a task runner) as an MCP
// server: every tool of the node's default agent, with the tool's own name and
// schema, called through the node's LocalEffects (so timeouts, limits and
// cancellation apply: a cancelled MCP request cancels the tool's context); the tool
// list follows the node's catalog (notifications/tools/list_changed to the client
// when an MCP server behind the node changes its tools); and run_task {"input",
// "session_id"?, "task_id"?, "agent"?}, which submits a task to the node and answers
// with the task's final output (a failed task is a tool error with the reason; a
// task_id names the task as a task body's does, so that run_task called again with
// it answers with that one task's result instead of running another); and
// task_result {"session_id", "wait"?}, which answers with the result of the task a
// run_task started in that session, waiting while it runs, for a client whose
// run_task call was cut off (the node restarted). `node mcp`
// serves it over stdio; `node serve` over Streamable HTTP at /mcp on the node's HTTP
// server. The node has no authentication yet: /mcp, like the rest of the API, is for
// the host it binds to (127.0.0.1 by default); the SDK's handler also refuses
// requests whose Host or Origin is not local when the listener is on loopback
// (DNS rebinding).
//
// # Server: resources, prompts, logging and progress
//
// The server also offers the resources, resource templates and prompts of its
// Sources (ServerOptions.Sources), merged (the first source's wins on a clash, the
// others' are logged) and offered again at each change: SkillSource (each skill's
// instructions as a prompt, its files as skill://NAME/PATH resources, read with
// skills.Set.ReadBytes, confined to the skill's folder), a Client (its servers'
// resources and templates with their URIs, their prompts as "<server>__<prompt>",
// reads and subscriptions passed on, updates passed back), and a Catalog, such as
// the one ServedConfig (the configuration's "mcp_server") declares. Resources are
// text or blobs; a template's reader gets the values of its variables; a prompt's
// required arguments are checked before its Get, and its declared Values answer
// completion/complete. Subscriptions are counted per URI: the first turns the
// source's Watch on, the last unsubscribe (or the end of the last session
// subscribed) turns it off; Server.ResourceUpdated tells the subscribers.
//
// Every tools/call is followed (progress.go): log notifications at the level the
// client asked for (logging/setLevel, or the request's _meta under the protocol of
// 2026-07-28) and, when the request has a progressToken, progress notifications at
// the start, for each event of run_task's task (the node's RunTaskEach: model steps
// and tool calls, by tool name only), every ProgressInterval while the call runs
// (which also keeps a client's request timeout from firing), and at the end, with
// the total. A request without a progressToken gets a ping every ProgressInterval
// instead, related to the call (over Streamable HTTP it travels on the call's
// response stream), so that a client that reads that stream with a read timeout
// (the Python SDK: 300 s) sees it live. A client's stream of notifications (the
// GET) gets an SSE comment when it was silent for StreamKeepAlive, so that a proxy
// that cuts silent responses (nginx: a minute) does not end it between the
// server's pings.
//
// Over Streamable HTTP, a client whose connection drops resumes its streams
// (Last-Event-ID; the events are kept in memory, up to 10 MiB); a session's log
// level, resource subscriptions and run_task calls are events of a stream of its
// own in the node's log (mcp/session/<ID>), so that a node that resumes the session
// after a restart, or another node, sets them again and answers a cut run_task
// with its task's result, once (server_state.go, server_calls.go); Handler answers
// a request larger than it takes with 413 and
// a JSON-RPC error, and CloseStreams (at the HTTP server's shutdown) ends the
// clients' streams of notifications.
package mcp
