package node

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// Route is one endpoint of the node's HTTP API. The node's routes (Node.Routes)
// are one table: Handler registers each of them on its mux, and /openapi.json
// describes each of them from its Doc. Adding an endpoint is adding a Route to
// that table (apiRoutes here, or Node.HandleRoute for handlers from outside the
// package): a route registered on the mux any other way fails
// TestEveryMuxRegistrationGoesThroughTheRouteTable.
type Route struct {
	// Method is the HTTP method; "" serves every method (the handler answers each
	// itself, as /mcp does) and Doc.Methods lists them.
	Method string
	// Path is the http.ServeMux path, with {name} and {name...} wildcards.
	Path string
	// Handler serves the route.
	Handler http.Handler
	// MaxBody bounds the request body: reading past it fails. 0 is
	// HTTPConfig.MaxBody, and then a Content-Length above it is answered 413 before
	// the handler runs; a route that sets MaxBody answers an overflow itself, with
	// the 413 of its choice.
	MaxBody int64
	// JSONRPC marks a route that speaks JSON-RPC (/mcp): the gate's refusals of its
	// requests (401, 403, 429) carry a JSON-RPC error, with the same status and
	// headers, rather than the API's {"error"}: an MCP client shows its message
	// (the Python SDK says only "Server returned an error response" of another
	// body), so that its user learns that the token is missing or wrong.
	JSONRPC bool
	// Doc describes the route in the OpenAPI document.
	Doc RouteDoc
}

// Pattern is the route's http.ServeMux pattern.
func (r Route) Pattern() string {
	if r.Method == "" {
		return r.Path
	}
	return r.Method + " " + r.Path
}

// RouteDoc describes a route in the OpenAPI document (/openapi.json).
type RouteDoc struct {
	// Summary is one line on what the route does.
	Summary string
	// Methods are the methods a route of every method (Method "") answers; default
	// GET and POST.
	Methods []string
	// Query are the query parameters.
	Query []Param
	// Body is the request body, nil for none.
	Body *Body
	// Responses are the route's own answers; the document adds 401, 413, 429,
	// 408 (for routes that read their body: MaxBody set, or Body) and (for routes
	// with a body or parameters) 400.
	Responses []Response
}

// Param is a query parameter of a route.
type Param struct {
	Name        string
	Description string
	// Type is string (default), integer, number or boolean.
	Type     string
	Required bool
}

// Body is a request or response body: its media type and the shape of its
// content.
type Body struct {
	// ContentType defaults to application/json.
	ContentType string
	// Schema is a JSON Schema (a Schema) or a Go value whose type gives it (by its
	// JSON encoding, as schemaOf derives it); nil: any content.
	Schema any
	// Optional marks a body the request may leave out.
	Optional bool
}

// Schema is a JSON Schema written out.
type Schema map[string]any

// Response is one answer of a route.
type Response struct {
	Status      int
	Description string
	// Body is the content; nil for none.
	Body *Body
}

// jsonBody is an application/json body shaped as v's type.
func jsonBody(v any) *Body { return &Body{ContentType: "application/json", Schema: v} }

// ok, created and accepted are the usual successful answers.
func ok(desc string, v any) Response       { return Response{http.StatusOK, desc, jsonBody(v)} }
func created(desc string, v any) Response  { return Response{http.StatusCreated, desc, jsonBody(v)} }
func accepted(desc string, v any) Response { return Response{http.StatusAccepted, desc, jsonBody(v)} }

// notFound, conflict and unavailable are the usual refusals, with an error body.
func notFound(desc string) Response { return Response{http.StatusNotFound, desc, jsonBody(apiError{})} }
func conflict(desc string) Response { return Response{http.StatusConflict, desc, jsonBody(apiError{})} }
func unavailable(desc string) Response {
	return Response{http.StatusServiceUnavailable, desc, jsonBody(apiError{})}
}

// notJSON refuses a body of another content type than the route takes;
// keyReused refuses an Idempotency-Key sent before with another request.
func notJSON(desc string) Response {
	return Response{http.StatusUnsupportedMediaType, desc, jsonBody(apiError{})}
}

var keyReused = Response{http.StatusUnprocessableEntity, "the Idempotency-Key was sent before with another request: nothing was written; use a new key for a new request", jsonBody(apiError{})}

// sessionFailed answers a request to a session whose actor failed on it, or was
// given up after repeated failures (actors.ErrSessionFailed).
var sessionFailed = Response{http.StatusInternalServerError, "the session failed (its actor failed on the request, or repeatedly); its next request starts it again from its log", jsonBody(apiError{})}

// Routes returns the node's HTTP API: its own routes (those of memory and of the
// knowledge bases when the node has them) and those added with Handle and
// HandleRoute, in the order Handler registers them.
func (n *Node) Routes() []Route {
	return append(n.apiRoutes(), n.routes...)
}

// apiRoutes is the node's own route table.
func (n *Node) apiRoutes() []Route {
	str := func(name, desc string) Param { return Param{Name: name, Description: desc} }
	intp := func(name, desc string) Param { return Param{Name: name, Description: desc, Type: "integer"} }
	sessionGone := notFound("no such session")
	routes := []Route{
		{Method: "POST", Path: "/v1/tasks", Handler: http.HandlerFunc(n.postTask), MaxBody: maxBody, Doc: RouteDoc{
			Summary: "Submit a task; it runs in its session (a new one unless session_id is given); Idempotency-Key makes the same request sent again the same task, run once",
			Body:    jsonBody(taskSchema()),
			Responses: []Response{accepted("the task is accepted: its session, and its task ID (its task_id, else the ID the node gave it), which its result carries", Schema{"type": "object", "properties": Schema{"session_id": Schema{"type": "string"}, "task_id": Schema{"type": "string"}}}), notJSON("the body is not application/json"),
				{http.StatusTooManyRequests, "the session has MaxQueuedTasks tasks waiting their turn: nothing was recorded; send it again after Retry-After seconds", jsonBody(apiError{})},
				unavailable("the task was not accepted"), sessionFailed}}},
		{Method: "GET", Path: "/v1/sessions", Handler: http.HandlerFunc(n.listSessions), Doc: RouteDoc{
			Summary: "List sessions, the latest first",
			Query: []Param{intp("limit", "at most this many, 1 to 10000 (default 100)"), str("status", "only the agents' sessions with this status (no other stream)"),
				str("since", "only sessions started at or after this time (RFC 3339, or a duration back from now such as 24h)"),
				str("updated_since", "only sessions with an event at or after this time (RFC 3339, or a duration back from now such as 24h)"),
				str("agent", "only the sessions whose first task named this agent (default for none): an agent's name, "+AgentNameRule+", or default; the limit counts its sessions only"),
				{Name: "sessions_only", Description: "only the agents' sessions, not the streams of notes, memory namespaces, knowledge bases, A2A push configs, dashboard sign-ins and the agents' configurations (which are listed with a status naming their kind)", Type: "boolean"},
				{Name: "detail", Description: "also each session's agent, usage and the tools of its calls waiting for approval (one log read per session)", Type: "boolean"}},
			Responses: []Response{ok("the sessions (agent, usage and waiting only with detail=true)", []SessionRow{}),
				{http.StatusBadRequest, "a parameter is malformed (an unknown status, an agent that is no agent's name, a limit out of range)", jsonBody(apiError{})}}}},
		{Method: "GET", Path: "/v1/feed/sessions", Handler: http.HandlerFunc(n.sessionsStream), Doc: RouteDoc{
			Summary: "The node's session changes as Server-Sent Events: a session event (data: the session as GET /v1/sessions?detail=true lists it) when a session starts a task, ends one, or a call of it waits for approval (waiting names its tool) or is answered; resync when the client fell behind (list again). Nothing is sent on connect",
			Query: []Param{str("status", "only sessions with this status (and those that just left it)"),
				str("since", "only sessions started at or after this time (RFC 3339, or a duration back from now such as 24h)"),
				str("agent", "only sessions whose first task named this agent (default for none): an agent's name, "+AgentNameRule+", or default")},
			Responses: []Response{{http.StatusOK, "the event stream (event: session or resync; comment lines keep it open)",
				&Body{ContentType: "text/event-stream", Schema: Schema{"type": "string"}}}, {http.StatusBadRequest, "a filter is malformed (an unknown status, an agent that is no agent's name)", jsonBody(apiError{})},
				unavailable("the feed cannot read the cluster's events")}}},
		{Method: "GET", Path: "/v1/sessions/{id}", Handler: http.HandlerFunc(n.getSession), Doc: RouteDoc{
			Summary:   "A session's status, output, error and the calls waiting for approval",
			Responses: []Response{ok("the session", sessionView{}), sessionGone}}},
		{Method: "GET", Path: "/v1/sessions/{id}/events", Handler: http.HandlerFunc(n.getEvents), Doc: RouteDoc{
			Summary: "A session's events in seq order: all of them, or a page (from, limit); a page shorter than limit is the last",
			Query: []Param{intp("from", "the first seq (default 1); past the session's last seq the answer is []"),
				intp("limit", "at most this many events, 1 to 10000 (default: all)")},
			Responses: []Response{ok("the events", []messages.Envelope{}), {http.StatusBadRequest, "from or limit is malformed", jsonBody(apiError{})}, sessionGone}}},
		{Method: "GET", Path: "/v1/sessions/{id}/stream", Handler: http.HandlerFunc(n.stream), Doc: RouteDoc{
			Summary: "A session's events as Server-Sent Events, from Last-Event-ID (a seq) on, then live, with model.delta increments of the model's answers between them",
			Query:   []Param{{Name: "deltas", Description: "false: no model.delta events, only the session's events (default true)", Type: "boolean"}},
			Responses: []Response{{http.StatusOK, "the event stream (id: seq, event: type, data: the event)",
				&Body{ContentType: "text/event-stream", Schema: Schema{"type": "string"}}}, sessionGone}}},
		{Method: "POST", Path: "/v1/sessions/{id}/cancel", Handler: http.HandlerFunc(n.cancel), MaxBody: cancelMaxBody, Doc: RouteDoc{
			Summary: "Cancel the session's running task, or the task the body names (task_id), running or waiting its turn",
			Body:    &Body{Schema: cancelBody{}, Optional: true},
			Responses: []Response{accepted("the task is being cancelled", Schema{"type": "object", "properties": Schema{
				"session_id": Schema{"type": "string"}, "status": Schema{"type": "string"}}}), sessionGone, conflict("the session has no running task, or none the body names running or waiting"), sessionFailed,
				notJSON("the body is not application/json"), unavailable("the cancellation was not recorded: send it again")}}},
		{Method: "POST", Path: "/v1/sessions/{id}/approvals/{call}", Handler: http.HandlerFunc(n.postApproval), MaxBody: approvalMaxBody, Doc: RouteDoc{
			Summary: "Approve or reject a tool call waiting for approval",
			Body:    jsonBody(approvalBody{}),
			Responses: []Response{accepted("the answer is recorded", Schema{"type": "object", "properties": Schema{
				"session_id": Schema{"type": "string"}, "call": Schema{"type": "string"}, "status": Schema{"type": "string", "enum": []string{"approved", "rejected"}}}}),
				sessionGone, conflict("the call is not waiting for approval"), sessionFailed,
				notJSON("the body is not application/json"), unavailable("the answer was not recorded: send it again")}}},
		{Method: "GET", Path: "/v1/approvals", Handler: http.HandlerFunc(n.listApprovals), Doc: RouteDoc{
			Summary:   "The tool calls waiting for approval, in every session",
			Responses: []Response{ok("the calls", []PendingApproval{})}}},
		{Method: "GET", Path: "/metrics", Handler: promhttp.HandlerFor(n.metrics.Registry, promhttp.HandlerOpts{}), Doc: RouteDoc{
			Summary:   "Prometheus metrics",
			Responses: []Response{{http.StatusOK, "the metrics in the Prometheus text format", &Body{ContentType: "text/plain", Schema: Schema{"type": "string"}}}}}},
		{Method: "GET", Path: "/healthz", Handler: http.HandlerFunc(n.healthz), Doc: RouteDoc{
			Summary: "Health check, for load balancers and readiness probes: 503 while the node cannot take tasks (its Kafka brokers unreachable included, and, on a node without Kafka, its event log unable to write); 200 with status degraded and a reason while it takes them but its event log cannot write (on Kafka: they wait there until it can) (needs no token)",
			Responses: []Response{ok("healthy, or degraded", Schema{"type": "object", "properties": Schema{"status": Schema{"type": "string", "enum": []string{"ok", "degraded"}}, "reason": Schema{"type": "string"}}}),
				{http.StatusServiceUnavailable, "unhealthy", jsonBody(Schema{"type": "object", "properties": Schema{"status": Schema{"type": "string"}, "reason": Schema{"type": "string"}}})}}}},
		{Method: "GET", Path: "/livez", Handler: http.HandlerFunc(n.livez), Doc: RouteDoc{
			Summary: "Liveness check, for liveness probes: 503 only when the node is stopping or its session host does not answer, not for a full disk (needs no token)",
			Responses: []Response{ok("alive", Schema{"type": "object", "properties": Schema{"status": Schema{"type": "string"}}}),
				{http.StatusServiceUnavailable, "not alive", jsonBody(Schema{"type": "object", "properties": Schema{"status": Schema{"type": "string"}, "reason": Schema{"type": "string"}}})}}}},
		{Method: "GET", Path: "/openapi.json", Handler: http.HandlerFunc(n.openAPI), Doc: RouteDoc{
			Summary:   "This document: the OpenAPI 3.0 description of the node's HTTP API",
			Responses: []Response{ok("the document", Schema{"type": "object"})}}},
	}
	if n.memories != nil {
		routes = append(routes,
			Route{Method: "POST", Path: "/v1/memories", Handler: http.HandlerFunc(n.postMemories), MaxBody: memoryMaxBody, Doc: RouteDoc{
				Summary: "Write memories: one memory object or an array; Idempotency-Key makes a retry write nothing twice",
				Body:    jsonBody(Schema{"oneOf": []any{schemaOf(memory.Input{}), schemaOf([]memory.Input{})}}),
				Responses: []Response{created("the memories are written", Schema{"type": "object", "properties": Schema{"ids": Schema{"type": "array", "items": Schema{"type": "string"}}}}),
					unavailable("the event log failed: send it again with the same Idempotency-Key (a vector store that does not answer fails no write: the vectors follow)"),
					notJSON("the body is not application/json"), keyReused}}},
			Route{Method: "GET", Path: "/v1/memories/search", Handler: http.HandlerFunc(n.searchMemories), Doc: RouteDoc{
				Summary: "Search a namespace's memories",
				Query: []Param{{Name: "namespace", Description: "the namespace", Required: true}, {Name: "q", Description: "what to search for", Required: true},
					intp("limit", "at most this many results"), str("tier", "the tier to search"), str("mode", "hybrid, vector or keyword")},
				Responses: []Response{ok("the results; note says what a hybrid search ranked without (the query's vector, when the query embedder failed, or the vector store), and why", Schema{"type": "object", "properties": Schema{"results": Schema{"type": "array", "items": Schema{"type": "object"}}, "note": Schema{"type": "string"}}}),
					unavailable("a search by vector (mode=vector) while the vector store does not answer or refuses the namespace's vectors; the error says which")}}},
			Route{Method: "GET", Path: "/v1/memories/{id}/history", Handler: http.HandlerFunc(n.memoryHistory), Doc: RouteDoc{
				Summary: "Where a memory came from and why it changed",
				Query:   []Param{str("namespace", "the memory's namespace (default: look in every namespace)")},
				Responses: []Response{ok("the history", HistoryAnswer{}), notFound("no such memory"),
					unavailable("the event log could not be read (the memory's namespace, or the namespaces to look in)")}}},
		)
	}
	if n.knowledge != nil {
		kbGone := notFound("no such knowledge base")
		kbDown := unavailable("the event log or the vector store did not answer: send it again")
		kbDimension := conflict("the embedder gives vectors of another dimension than the knowledge base's (its model changed): use the embedder the documents were ingested with, or add them again to another knowledge base")
		routes = append(routes,
			Route{Method: "GET", Path: "/v1/kb", Handler: http.HandlerFunc(n.listKnowledgeBases), Doc: RouteDoc{
				Summary: "The knowledge bases",
				Responses: []Response{ok("the bases", Schema{"type": "object", "properties": Schema{"bases": schemaOf([]knowledge.Stats{})}}),
					unavailable("the event log did not answer: send it again")}}},
			Route{Method: "GET", Path: "/v1/kb/{name}/documents", Handler: http.HandlerFunc(n.listKBDocuments), Doc: RouteDoc{
				Summary: "A knowledge base's documents",
				Responses: []Response{ok("the documents", Schema{"type": "object", "properties": Schema{
					"name": Schema{"type": "string"}, "documents": schemaOf([]knowledge.Document{})}}), kbGone, kbDown}}},
			Route{Method: "POST", Path: "/v1/kb/{name}/documents", Handler: http.HandlerFunc(n.postKBDocument), MaxBody: kbMaxBody, Doc: RouteDoc{
				Summary: "Ingest a document: JSON {source, content} (Markdown), or multipart/form-data with one file part; Idempotency-Key makes a retry write once",
				Body: jsonBody(Schema{"type": "object", "required": []string{"source", "content"}, "properties": Schema{
					"source": Schema{"type": "string"}, "content": Schema{"type": "string"}}}),
				Responses: []Response{ok("the document was there unchanged", Schema{"type": "object"}), created("the document was added or replaced", Schema{"type": "object"}),
					unavailable("the document was not ingested"), kbDimension, notJSON("the body is neither application/json nor multipart/form-data"), keyReused}}},
			Route{Method: "GET", Path: "/v1/kb/{name}/search", Handler: http.HandlerFunc(n.searchKB), Doc: RouteDoc{
				Summary: "Search a knowledge base",
				Query: []Param{{Name: "q", Description: "what to search for", Required: true}, intp("limit", "at most this many results"),
					str("mode", "hybrid (default), vector or bm25"), intp("multi_query", "rewrites of the query by the model"),
					{Name: "hyde", Description: "search with a hypothetical answer too", Type: "boolean"}, str("fusion", "convex (default), rrf or wrrf"),
					{Name: "alpha", Description: "convex fusion's vector share, in (0, 1]", Type: "number"}},
				Responses: []Response{ok("the results", KBSearchAnswer{}), kbGone,
					conflict("a vector search (mode=vector) while the embedder gives vectors of another dimension than the knowledge base's (its model changed; a hybrid search ranks by BM25 alone and says so)"), kbDown}}},
			Route{Method: "POST", Path: "/v1/kb/{name}/ask", Handler: http.HandlerFunc(n.askKB), MaxBody: kbMaxAskBody, Doc: RouteDoc{
				Summary: "Answer a question from a knowledge base, with citations",
				Body:    jsonBody(KBAskRequest{}),
				Responses: []Response{ok("the answer", knowledge.Answer{}), kbGone, notJSON("the body is not application/json"), kbDimension,
					unavailable("the knowledge base, its embedder or the model did not answer")}}},
			Route{Method: "DELETE", Path: "/v1/kb/{name}/documents/{source...}", Handler: http.HandlerFunc(n.deleteKBDocument), Doc: RouteDoc{
				Summary: "Remove a document (its source percent-encoded as the rest of the path)",
				Responses: []Response{ok("removed", Schema{"type": "object", "properties": Schema{"removed": Schema{"type": "string"}}}), kbGone, keyReused,
					unavailable("the removal was not recorded: send it again, with the same Idempotency-Key")}}},
			Route{Method: "DELETE", Path: "/v1/kb/{name}/documents", Handler: http.HandlerFunc(n.deleteKBDocument), Doc: RouteDoc{
				Summary: "Remove a document named by the source parameter (any name)",
				Query:   []Param{{Name: "source", Description: "the document's source", Required: true}},
				Responses: []Response{ok("removed", Schema{"type": "object", "properties": Schema{"removed": Schema{"type": "string"}}}), kbGone, keyReused,
					unavailable("the removal was not recorded: send it again, with the same Idempotency-Key")}}},
		)
	}
	routes = append(routes, Route{Method: "GET", Path: "/v1/stats", Handler: http.HandlerFunc(n.getStats), Doc: RouteDoc{
		Summary: "Analytics of the sessions in the log: what replay stats --json prints",
		Query: []Param{str("since", "only events at or after this time (RFC 3339, or a duration back from now such as 24h)"), str("agent", "only sessions of this agent"),
			intp("buckets", "also series: the range from since to now in this many buckets of time (1 to 1000), each with its tokens, cost, tool calls and latencies, and errors")},
		Responses: []Response{ok("the figures", Schema{"type": "object"})}}})
	routes = append(routes, n.uiRoutes()...)
	return append(routes, n.a2aRoutes()...)
}

// taskSchema is the body of POST /v1/tasks: Task's fields with the bounds that
// Task.Validate checks, input required, and no other field (DecodeTask refuses
// unknown ones).
func taskSchema() Schema {
	s := Schema(schemaOf(Task{}))
	props := s["properties"].(map[string]any)
	bound := func(name, desc string, more Schema) {
		p := props[name].(map[string]any)
		p["description"] = desc
		for k, v := range more {
			p[k] = v
		}
	}
	bound("input", "what the agent is asked: at most 1 MiB of UTF-8, not blank", Schema{"minLength": 1})
	bound("session_id", "the session to run it in (a new one when left out): "+SessionIDRule,
		Schema{"pattern": `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`})
	bound("task_id", "the client's name for the task, which its result carries: sent again to the session, it is the same task, run once; not with an Idempotency-Key; a task without session_id runs in session task.<task_id>: "+TaskIDRule,
		Schema{"pattern": `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`})
	bound("agent", "the agent that runs it (default: default): "+AgentNameRule, Schema{"pattern": agentNamePattern.String()})
	bound("max_steps", "model calls before the task fails (0 or left out: the agent's, 10 by default)", Schema{"minimum": 0, "maximum": 1000})
	bound("max_tokens", "the task's token budget, prompt and completion tokens together (0 or left out: the agent's, else none)",
		Schema{"minimum": 0, "maximum": MaxTokenBudget})
	bound("max_cost_usd", "the task's cost budget in US dollars, by the gateway's price table (0 or left out: the agent's, else none)",
		Schema{"minimum": 0, "maximum": MaxCostBudget})
	bound("deadline_ms", "a deadline relative to the task's arrival (left out: none)", Schema{"minimum": 1, "maximum": MaxDeadline.Milliseconds()})
	bound("reply_topic", "a bus topic that also receives the result; none of the node's own troupe. topics",
		Schema{"pattern": "^[A-Za-z0-9._-]{1," + strconv.Itoa(maxTopicName) + "}$"})
	s["required"] = []string{"input"}
	s["additionalProperties"] = false
	return s
}

// Handle adds a handler to the node's HTTP API (Handler, HTTPServer) at pattern (a
// http.ServeMux pattern, "[METHOD ]PATH"), described in the OpenAPI document only
// by its path and methods; HandleRoute describes it fully. Call it before
// HTTPServer.
func (n *Node) Handle(pattern string, h http.Handler) {
	method, path, found := strings.Cut(pattern, " ")
	if !found {
		method, path = "", pattern
	}
	n.HandleRoute(Route{Method: method, Path: strings.TrimSpace(path), Handler: h})
}

// HandleRoute adds a route to the node's HTTP API and its OpenAPI document. Call it
// before HTTPServer.
func (n *Node) HandleRoute(r Route) {
	n.routes = append(n.routes, r)
}
