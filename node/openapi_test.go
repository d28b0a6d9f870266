package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// The OpenAPI document the node serves is valid OpenAPI 3.0 (kin-openapi's
// validation) and names exactly the node's routes: every route of the table with
// each of its methods, and no operation that is not a route. Every protected
// operation documents 401 and 429, every POST 413.
func TestOpenAPIDocumentsEveryRouteAndNoOther(t *testing.T) {
	n, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	code, _, body := doCall(t, "GET", base+"/openapi.json", goodToken, "")
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", code, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatalf("loading the document: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	want := map[string]bool{} // "METHOD /path" in the document's form
	for _, r := range n.Routes() {
		methods := []string{r.Method}
		if r.Method == "" {
			methods = r.Doc.Methods
			if len(methods) == 0 {
				methods = []string{"GET", "POST"}
			}
		}
		for _, m := range methods {
			want[m+" "+openAPIForm(r.Path)] = true
		}
	}
	got := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + path
			got[key] = true
			if !want[key] {
				t.Errorf("the document names %s, which is no route of the node", key)
			}
			public := slices.Contains(node.PublicPaths, path)
			// The login is public, and answers 401 (a wrong token) and 429 (too many
			// attempts) itself.
			wantAuth := !public || path == "/v1/auth/login"
			for _, status := range []string{"401", "429"} {
				if (op.Responses.Value(status) != nil) != wantAuth {
					t.Errorf("%s: response %s documented: %v, want %v", key, status, op.Responses.Value(status) != nil, wantAuth)
				}
			}
			if method == "POST" && op.Responses.Value("413") == nil {
				t.Errorf("%s: no 413 response", key)
			}
			for _, p := range strings.Split(path, "/") {
				if strings.HasPrefix(p, "{") && op.Parameters.GetByInAndName("path", strings.Trim(p, "{}")) == nil {
					t.Errorf("%s: path parameter %s is not described", key, p)
				}
			}
		}
	}
	for key := range want {
		if !got[key] {
			t.Errorf("route %s is missing from the document", key)
		}
	}
	if len(want) < 20 {
		t.Errorf("only %d operations: the node with memory and knowledge bases has more", len(want))
	}
}

func openAPIForm(p string) string { return strings.ReplaceAll(p, "...}", "}") }

// The route table is the only way onto the API's mux: no file of the package
// registers a handler on a ServeMux but Handler, which registers the table. A new
// endpoint registered with mux.HandleFunc would be served but missing from
// /openapi.json, and unchecked by TestEveryRouteNeedsTheToken: add it to apiRoutes
// (or call HandleRoute) instead.
func TestEveryMuxRegistrationGoesThroughTheRouteTable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(x ast.Node) bool {
				c, ok := x.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := c.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "HandleFunc" && sel.Sel.Name != "Handle") {
					return true
				}
				if fn.Name.Name == "Handler" && file == "http.go" {
					return true // the table's registration
				}
				if id, ok := sel.X.(*ast.Ident); sel.Sel.Name == "Handle" && (!ok || id.Name == "n") {
					return true // Node.Handle (the table's), slog's h.Handler.Handle (actorlog.go)
				}
				t.Errorf("%s: %s.%s registers a route outside the route table (Routes): add a Route to apiRoutes instead",
					fset.Position(c.Pos()), exprString(sel.X), sel.Sel.Name)
				return true
			})
		}
	}
}

func exprString(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	b, _ := json.Marshal(e)
	return string(b)
}

// The document describes the rows of GET /v1/sessions with the fields detail=true
// adds: agent, usage and waiting.
func TestOpenAPIDescribesTheSessionRows(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	_, _, body := doCall(t, "GET", base+"/openapi.json", goodToken, "")
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	op := doc.Paths.Find("/v1/sessions").Get
	rows := op.Responses.Value("200").Value.Content.Get("application/json").Schema.Value
	if rows.Items == nil {
		t.Fatalf("GET /v1/sessions answers %v, want an array of rows", rows.Type)
	}
	row := rows.Items.Value.Properties
	for _, name := range []string{"session_id", "status", "agent", "usage", "waiting"} {
		if row[name] == nil {
			t.Errorf("a row of GET /v1/sessions has no %q", name)
		}
	}
	if w := row["waiting"]; w != nil && (!w.Value.Type.Is("array") || !w.Value.Items.Value.Type.Is("string")) {
		t.Errorf("waiting is %v of %v, want an array of strings", w.Value.Type, w.Value.Items)
	}
}

// The task body's schema says what POST /v1/tasks takes: a body the schema accepts
// is accepted, one it refuses is refused (input required, no other field, the
// bounds of Task.Validate), so that a client made from the document sends what
// the node takes.
func TestOpenAPITaskSchemaAgreesWithTheNode(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{})
	code, _, body := doCall(t, "GET", base+"/openapi.json", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", code, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	schema := doc.Paths.Find("/v1/tasks").Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	for _, b := range []string{
		`{"input": "echo hi"}`,
		`{}`,
		`{"session_id": "s1"}`,
		`{"input": "echo hi", "foo": 1}`,
		`{"input": "echo hi", "session_id": "a.b:c-d_e"}`,
		`{"input": "echo hi", "session_id": "-a"}`,
		`{"input": "echo hi", "session_id": "a/b"}`,
		`{"input": "echo hi", "session_id": "` + strings.Repeat("s", 128) + `"}`,
		`{"input": "echo hi", "session_id": "` + strings.Repeat("s", 129) + `"}`,
		`{"input": "echo hi", "agent": "default"}`,
		`{"input": "echo hi", "agent": "Default"}`,
		`{"input": "echo hi", "max_steps": 1000}`,
		`{"input": "echo hi", "max_steps": 1001}`,
		`{"input": "echo hi", "max_steps": -1}`,
		`{"input": "echo hi", "max_tokens": 100000000}`,
		`{"input": "echo hi", "max_tokens": 100000001}`,
		`{"input": "echo hi", "max_cost_usd": 1000000}`,
		`{"input": "echo hi", "max_cost_usd": 1000000.5}`,
		`{"input": "echo hi", "deadline_ms": 1}`,
		`{"input": "echo hi", "deadline_ms": 0}`,
		`{"input": "echo hi", "deadline_ms": 2592000001}`,
		`{"input": "echo hi", "reply_topic": "my.results"}`,
		`{"input": "echo hi", "reply_topic": "my results"}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			t.Fatal(err)
		}
		schemaErr := schema.VisitJSON(v)
		code, _, answer := doCall(t, "POST", base+"/v1/tasks", "", b)
		if (schemaErr == nil) != (code == http.StatusAccepted) {
			t.Errorf("%s: the schema says %v, the node %d %s", b, schemaErr, code, answer)
		}
	}
}

// The document's description names both paths of a named agent's card that need
// no token: A2A 0.3's agent-card.json and 0.2's agent.json (the second was not
// named).
func TestOpenAPINamesBothPublicCardPathsOfNamedAgents(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{Auth: node.AuthConfig{Tokens: []string{goodToken}}})
	_, _, body := doCall(t, "GET", base+"/openapi.json", goodToken, "")
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a2a/NAME/.well-known/agent-card.json", "/a2a/NAME/.well-known/agent.json"} {
		if !strings.Contains(doc.Info.Description, p) {
			t.Errorf("the document's description does not name %s:\n%s", p, doc.Info.Description)
		}
	}
}

// Every answer a route gives a client's mistake is one the document names for
// that operation: a body of another content type (415) on each route that takes
// JSON, an Idempotency-Key sent again with other memories or another document
// (422), and a stream's deltas parameter; a client made from the document then
// knows each status it can meet. Before, 415 was named for POST /v1/tasks only,
// 422 nowhere, and the stream's deltas not at all.
func TestOpenAPINamesTheRoutesRefusals(t *testing.T) {
	_, base, _ := authNode(t, node.HTTPConfig{})
	code, _, body := doCall(t, "GET", base+"/openapi.json", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", code, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	plain := map[string]string{"Content-Type": "text/plain"}
	for _, c := range []struct {
		method, path, url, body string
		hdr                     map[string]string
		want                    int
	}{
		{"POST", "/v1/tasks", "/v1/tasks", `{"input":"echo hi","session_id":"s1"}`, nil, http.StatusAccepted},
		{"POST", "/v1/sessions/{id}/cancel", "/v1/sessions/s1/cancel", "x", plain, http.StatusUnsupportedMediaType},
		{"POST", "/v1/sessions/{id}/approvals/{call}", "/v1/sessions/s1/approvals/c1", "x", plain, http.StatusUnsupportedMediaType},
		{"POST", "/v1/memories", "/v1/memories", "x", plain, http.StatusUnsupportedMediaType},
		{"POST", "/v1/kb/{name}/documents", "/v1/kb/kb1/documents", "x", plain, http.StatusUnsupportedMediaType},
		{"POST", "/v1/kb/{name}/ask", "/v1/kb/kb1/ask", "x", plain, http.StatusUnsupportedMediaType},
		{"POST", "/v1/memories", "/v1/memories", `{"namespace":"n","tier":"semantic","content":"a"}`,
			map[string]string{"Idempotency-Key": "k1"}, http.StatusCreated},
		{"POST", "/v1/memories", "/v1/memories", `{"namespace":"n","tier":"semantic","content":"b"}`,
			map[string]string{"Idempotency-Key": "k1"}, http.StatusUnprocessableEntity},
		{"POST", "/v1/kb/{name}/documents", "/v1/kb/kb1/documents", `{"source":"a.md","content":"# A\n\nalpha"}`,
			map[string]string{"Idempotency-Key": "k2"}, http.StatusCreated},
		{"POST", "/v1/kb/{name}/documents", "/v1/kb/kb1/documents", `{"source":"a.md","content":"# A\n\nbeta"}`,
			map[string]string{"Idempotency-Key": "k2"}, http.StatusUnprocessableEntity},
	} {
		got, _, answer := rawCall(t, c.method, base+c.url, c.body, c.hdr)
		if got != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.url, got, answer, c.want)
			continue
		}
		op := doc.Paths.Find(c.path).GetOperation(c.method)
		if op == nil {
			t.Errorf("%s %s is not in the document", c.method, c.path)
			continue
		}
		if op.Responses.Value(strconv.Itoa(got)) == nil {
			t.Errorf("%s %s answers %d (%s), which the document does not name", c.method, c.path, got, answer)
		}
	}
	if op := doc.Paths.Find("/v1/sessions/{id}/stream").Get; op.Parameters.GetByInAndName("query", "deltas") == nil {
		t.Errorf("GET /v1/sessions/{id}/stream: the deltas parameter is not described")
	}
}

// Each status the knowledge base, memory and body-reading routes answer when a
// service fails, a vector of another dimension is asked for, or a body comes too
// slowly is one the OpenAPI document names for that operation: a 408 for a slow
// body on every route that reads one, 409 and 503 on a knowledge base's search,
// 503 on its list, its documents' list and a removal, and 503 on a memory's
// history. Before, the document named none of them, and a client made from it
// met statuses it had not been told of.
func TestOpenAPINamesTheAnswersOfFailures(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	down := &storeDownLog{Log: lg}
	emb := &switchedEmbedder{}
	emb.dim.Store(64)
	_, base, _ := serveHTTP(t, node.Config{Log: down, A2A: &node.A2AConfig{}, Memory: &memory.Config{}, Knowledge: &knowledge.Config{Embedder: emb},
		HTTP: node.HTTPConfig{ReadTimeout: 600 * time.Millisecond, WriteTimeout: 200 * time.Millisecond}})
	code, _, body := doCall(t, "GET", base+"/openapi.json", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", code, body)
	}
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	names := func(method, path, url string, got int, answer string) {
		t.Helper()
		op := doc.Paths.Find(path).GetOperation(method)
		if op == nil {
			t.Errorf("%s %s is not in the document", method, path)
			return
		}
		if op.Responses.Value(strconv.Itoa(got)) == nil {
			t.Errorf("%s %s answers %d (%s), which the document does not name", method, path, got, answer)
		}
	}
	if code, _, answer := doCall(t, "POST", base+"/v1/kb/kb1/documents", "", `{"source":"a.md","content":"# A\n\nalpha beta gamma"}`); code != http.StatusCreated {
		t.Fatalf("adding a document: %d %s", code, answer)
	}
	code, _, answer := doCall(t, "POST", base+"/v1/memories", "", `{"namespace":"user:ann","tier":"semantic","content":"Ann likes tea"}`)
	var written struct{ IDs []string }
	if err := json.Unmarshal([]byte(answer), &written); code != http.StatusCreated || err != nil || len(written.IDs) != 1 {
		t.Fatalf("writing a memory: %d %s", code, answer)
	}

	for _, c := range []struct{ path, url string }{{"/v1/tasks", "/v1/tasks"},
		{"/v1/sessions/{id}/approvals/{call}", "/v1/sessions/s1/approvals/c1"}, {"/v1/memories", "/v1/memories"},
		{"/v1/kb/{name}/documents", "/v1/kb/kb1/documents"}, {"/v1/kb/{name}/ask", "/v1/kb/kb1/ask"}, {"/a2a", "/a2a"}} {
		got, answer := slowPost(t, base, c.url)
		if got != http.StatusRequestTimeout {
			t.Errorf("POST %s with a slow body: %d %s, want 408", c.url, got, answer)
			continue
		}
		names("POST", c.path, c.url, got, answer)
	}

	emb.dim.Store(32) // the embedder's server switched models
	if code, _, answer := doCall(t, "GET", base+"/v1/kb/kb1/search?q=alpha&mode=vector", "", ""); code != http.StatusConflict {
		t.Errorf("a vector search with vectors of another dimension: %d %s, want 409", code, answer)
	} else {
		names("GET", "/v1/kb/{name}/search", "/v1/kb/kb1/search", code, answer)
	}

	down.down.Store(true)
	for _, c := range []struct{ method, path, url string }{
		{"GET", "/v1/kb", "/v1/kb"},
		{"GET", "/v1/kb/{name}/documents", "/v1/kb/kb1/documents"},
		{"GET", "/v1/kb/{name}/search", "/v1/kb/kb1/search?q=alpha"},
		{"DELETE", "/v1/kb/{name}/documents/{source}", "/v1/kb/kb1/documents/a.md"},
		{"DELETE", "/v1/kb/{name}/documents", "/v1/kb/kb1/documents?source=a.md"},
		{"GET", "/v1/memories/{id}/history", "/v1/memories/" + written.IDs[0] + "/history"},
		{"GET", "/v1/memories/{id}/history", "/v1/memories/" + written.IDs[0] + "/history?namespace=user:ann"},
	} {
		got, _, answer := doCall(t, c.method, base+c.url, "", "")
		if got != http.StatusServiceUnavailable {
			t.Errorf("%s %s with the log down: %d %s, want 503", c.method, c.url, got, answer)
			continue
		}
		names(c.method, c.path, c.url, got, answer)
	}
}

// slowPost posts to url on base a body that stops after its first bytes, and
// returns the answer's status and body.
func slowPost(t *testing.T, base, url string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST "+url+" HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\""); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s with a slow body: no answer (%v)", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// storeDownLog is an event log whose knowledge base and memory streams fail to be read,
// listed or appended to while down is set.
type storeDownLog struct {
	eventlog.Log
	down atomic.Bool
}

func (l *storeDownLog) failing(stream string) bool {
	return l.down.Load() && (strings.HasPrefix(stream, knowledge.StreamPrefix) || strings.HasPrefix(stream, memory.StreamPrefix))
}

func (l *storeDownLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && l.failing(events[0].SessionID) {
		return errors.New("the log is down")
	}
	return l.Log.Append(ctx, events)
}

func (l *storeDownLog) Read(ctx context.Context, stream string, from uint64) ([]messages.Envelope, error) {
	if l.failing(stream) {
		return nil, errors.New("the log is down")
	}
	return l.Log.Read(ctx, stream, from)
}

func (l *storeDownLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if f.Prefix != "" && l.failing(f.Prefix) {
		return nil, errors.New("the log is down")
	}
	return l.Log.Sessions(ctx, f)
}

// switchedEmbedder is the hashing embedder at the dimension dim holds.
type switchedEmbedder struct{ dim atomic.Int64 }

func (e *switchedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return llm.HashingEmbedder{Dim: int(e.dim.Load())}.Embed(ctx, texts)
}
