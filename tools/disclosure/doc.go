// Package disclosure decides how an agent's tools reach the model: all their schemas
// in every request, or a few at first and the rest on the model's demand.
//
// Three strategies (Strategy):
//
//   - All: every schema in every request (the baseline).
//   - Catalog: the always-loaded tools (source "builtin", or none) and load_tools;
//     the system prompt lists one line per group — the tools of one source, such as
//     "mcp:github" or "skill:pdf-forms" — and load_tools(group) adds that group's
//     schemas to the session's requests.
//   - Search: the always-loaded tools, search_tools and call_tool; search_tools(query)
//     ranks the other tools by their name, description and group with BM25 and adds
//     the best matches to the session's requests; call_tool(name, arguments) calls
//     any tool of the agent's catalog by name.
//
// Data enters as the agent's tools (New) and leaves as the registry's tools with the
// strategy's own (Disclosure.Tools), a system-prompt section (PromptSection), and, for
// each model request, the specs it offers (Offer). What a session has loaded is not
// kept here: load_tools and search_tools answer with JSON naming what they loaded
// ({"loaded": [...]}), the session records that answer as a ToolCallCompleted event
// like any tool's, and its folded state (actors.SessionState) hands the recorded
// answers to Offer. A session refolded after a restart, or replayed, thus offers the
// same tools. Offer is pure and returns specs sorted by name, so the tool section of
// a prompt is byte-identical from step to step until something is loaded, and grows
// only by insertion after that.
//
// call_tool dispatches to the named tool's Call with the call's own idempotency key,
// under the call's context (its timeout and cancellation); it refuses a name outside
// the agent's catalog and the disclosure tools themselves.
package disclosure
