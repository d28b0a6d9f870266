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
//     ranks the other tools by their name, description and group — with BM25, or by
//     embedding similarity when an embedder is configured (WithEmbedder) — and adds
//     the best matches to the session's requests; call_tool(name, arguments) calls
//     any of the agent's tools by name.
//
// Data enters as the agent's tools (New) and its tool catalog (WithCatalog: the MCP
// servers' tools, which join and leave while the node runs), and leaves as the
// registry's tools with the strategy's own (Disclosure.Tools) and, for each model
// request, the specs it offers and the section the system prompt gains (Disclose).
// A catalog tool belongs to the group of its source ("mcp:<server>"); the groups,
// the search index and the section are made again only when the catalog changes (a
// view of the disclosure is kept per state of the catalog).
//
// What a session has loaded is not kept here: load_tools and search_tools answer
// with JSON naming what they loaded ({"loaded": [...]}), the session records that
// answer as a ToolCallCompleted event like any tool's, and its folded state
// (actors.SessionState) reads each answer once, as it folds it, into the tools and
// groups loaded (actors.ToolLoads), which it hands to DiscloseFolded with the
// catalog's tools now: what a request costs does not grow with the session's loads.
// Disclose (every recorded answer, read again) gives the same; both are pure
// functions of the loads and the catalog, returning specs sorted by name:
// a session refolded after a restart, or replayed, offers the same tools over the
// same catalog; the tool section of a prompt is byte-identical from step to step
// until something is loaded or the catalog changes, and grows only by insertion
// after a load, so a provider's prompt cache keeps hitting. A group loaded with
// load_tools stays loaded whole (a tool its server adds later is offered too); a
// loaded tool that left the catalog is no longer offered, and offered again if it
// comes back.
//
// call_tool dispatches to the named tool's Call with the call's own idempotency key,
// under the call's context (its timeout and cancellation); a catalog tool is looked
// up in the catalog at the call. It refuses a name that is not the agent's, and the
// disclosure tools themselves.
//
// One Disclosure serves a node's agents: WithScope bounds, per agent of a call
// (tools.Call.Agent), what its strategy's tools see — a named agent's listed tools —
// so its call_tool refuses, with a tool error, any other tool or chain, search_tools
// finds none other and load_tools loads none other.
package disclosure
