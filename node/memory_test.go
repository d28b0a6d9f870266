package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/notes"
	"github.com/troupe-run/troupe/vectorstore"
)

// countingLog is an event log that counts the Append calls that wrote memory events
// or notes.
type countingLog struct {
	eventlog.Log
	mu      sync.Mutex
	appends map[string]int // by stream
}

func newCountingLog(l eventlog.Log) *countingLog {
	return &countingLog{Log: l, appends: map[string]int{}}
}

func (l *countingLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && (memory.IsStream(events[0].SessionID) || notes.IsStream(events[0].SessionID)) {
		l.mu.Lock()
		l.appends[events[0].SessionID]++
		l.mu.Unlock()
	}
	return l.Log.Append(ctx, events)
}

// memoryAppends is how many appends wrote to the streams of memory namespaces.
func (l *countingLog) memoryAppends() int { return l.appendsTo(memory.IsStream) }

// notesAppends is how many appends wrote to the streams of agents' notes.
func (l *countingLog) notesAppends() int { return l.appendsTo(notes.IsStream) }

// appendsTo is how many appends wrote to the streams that are.
func (l *countingLog) appendsTo(are func(string) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for stream, c := range l.appends {
		if are(stream) {
			n += c
		}
	}
	return n
}

// countingEmbedder is the offline embedder, counting its calls and the texts embedded.
type countingEmbedder struct {
	calls, texts atomic.Int64
}

func (e *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.calls.Add(1)
	e.texts.Add(int64(len(texts)))
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

// memoryNode is a node with agent memory on a counting log, for one test.
type memoryNode struct {
	n   *node.Node
	log *countingLog
	emb *countingEmbedder
}

func newMemoryNode(t *testing.T, cfg node.Config) memoryNode {
	t.Helper()
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	mn := memoryNode{log: newCountingLog(base), emb: &countingEmbedder{}}
	cfg.Log = mn.log
	if cfg.Memory == nil {
		cfg.Memory = &memory.Config{}
	}
	cfg.Memory.Embedder = mn.emb
	mn.n = nodetest.Start(t, cfg)
	return mn
}

// do serves one request on the node's handler and returns the status and body.
func (mn memoryNode) do(t *testing.T, method, target, contentType string, body io.Reader, header ...string) (int, []byte) {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	mn.n.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// post writes memories and returns the status and the IDs (or the error).
func (mn memoryNode) post(t *testing.T, body string, header ...string) (int, []string, string) {
	t.Helper()
	code, b := mn.do(t, http.MethodPost, "/v1/memories", "application/json", strings.NewReader(body), header...)
	var out struct {
		IDs   []string `json:"ids"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("POST /v1/memories: %d %q: %v", code, b, err)
	}
	return code, out.IDs, out.Error
}

// mustPost writes memories and fails unless they were created.
func (mn memoryNode) mustPost(t *testing.T, body string, header ...string) []string {
	t.Helper()
	code, ids, msg := mn.post(t, body, header...)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/memories: %d %s", code, msg)
	}
	return ids
}

type searchAnswer struct {
	Results []struct {
		ID        string          `json:"id"`
		Tier      string          `json:"tier"`
		Content   string          `json:"content"`
		Score     float64         `json:"score"`
		Metadata  json.RawMessage `json:"metadata"`
		Timestamp time.Time       `json:"timestamp"`
	} `json:"results"`
	Note  string `json:"note"`
	Error string `json:"error"`
}

func (mn memoryNode) search(t *testing.T, query url.Values) (int, searchAnswer) {
	t.Helper()
	code, b := mn.do(t, http.MethodGet, "/v1/memories/search?"+query.Encode(), "", nil)
	var out searchAnswer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET /v1/memories/search: %d %q: %v", code, b, err)
	}
	return code, out
}

type historyAnswer struct {
	ID        string          `json:"id"`
	Namespace string          `json:"namespace"`
	History   []memory.Change `json:"history"`
	Error     string          `json:"error"`
}

func (mn memoryNode) history(t *testing.T, id, namespace string) (int, historyAnswer) {
	t.Helper()
	target := "/v1/memories/" + url.PathEscape(id) + "/history"
	if namespace != "" {
		target += "?namespace=" + url.QueryEscape(namespace)
	}
	code, b := mn.do(t, http.MethodGet, target, "", nil)
	var out historyAnswer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET %s: %d %q: %v", target, code, b, err)
	}
	return code, out
}

// memoryEvents returns the events of a namespace's stream.
func memoryEvents(t *testing.T, log eventlog.Log, namespace string) []messages.Envelope {
	t.Helper()
	events, err := log.Read(context.Background(), memory.Stream(namespace), 1)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

func TestMemoryPostOneAndMany(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})

	one := mn.mustPost(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice prefers aisle seats","importance":0.8,"metadata":{"source":"crm"}}`)
	if len(one) != 1 || one[0] == "" {
		t.Fatalf("one object: ids %v", one)
	}
	many := mn.mustPost(t, `[
		{"namespace":"user:alice","tier":"episodic","content":"Alice flew to Lisbon in May","timestamp":"2026-05-03T10:00:00Z","participants":["alice"]},
		{"namespace":"user:bob","tier":"working","content":"Bob is booking a hotel"},
		{"namespace":"user:alice","tier":"semantic","content":"Alice is vegetarian"}
	]`)
	if len(many) != 3 {
		t.Fatalf("array of 3: ids %v", many)
	}
	// The ids come in the order of the body, across namespaces.
	for i, want := range []struct{ ns, content string }{
		{"user:alice", "Alice flew to Lisbon in May"}, {"user:bob", "Bob is booking a hotel"}, {"user:alice", "Alice is vegetarian"},
	} {
		ns, err := mn.n.Memories().Namespace(context.Background(), want.ns)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := ns.Get(many[i])
		if !ok || m.Content != want.content {
			t.Errorf("id %d (%s) is %+v in %s; want %q", i, many[i], m, want.ns, want.content)
		}
	}
	// One append per namespace of the body: alice (1 + 1) and bob (1).
	if got := mn.log.memoryAppends(); got != 3 {
		t.Errorf("%d appends for 2 requests over 3 namespace batches; want 3", got)
	}

	// An exact duplicate returns the existing id and writes nothing.
	before := len(memoryEvents(t, mn.log, "user:alice"))
	dup := mn.mustPost(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice prefers aisle seats"}`)
	if len(dup) != 1 || dup[0] != one[0] {
		t.Errorf("an exact duplicate got %v; want the existing id %s", dup, one[0])
	}
	if after := len(memoryEvents(t, mn.log, "user:alice")); after != before {
		t.Errorf("an exact duplicate wrote %d events", after-before)
	}
}

func TestMemoryBatchOfAThousandIsOneAppend(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	var b strings.Builder
	b.WriteByte('[')
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"namespace":"agent:bulk","tier":"semantic","content":"fact number %d about topic %d"}`, i, i%37)
	}
	b.WriteByte(']')
	calls := mn.emb.calls.Load()
	ids := mn.mustPost(t, b.String())
	if len(ids) != 1000 {
		t.Fatalf("%d ids for 1,000 memories", len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %s twice", id)
		}
		seen[id] = true
	}
	if got := mn.log.memoryAppends(); got != 1 {
		t.Errorf("1,000 memories took %d appends; want 1", got)
	}
	if got := mn.emb.calls.Load() - calls; got != 1 {
		t.Errorf("1,000 memories took %d embedder calls; want 1", got)
	}
	if got := len(memoryEvents(t, mn.log, "agent:bulk")); got != 1000 {
		t.Errorf("%d events for 1,000 memories", got)
	}
}

func TestMemoryIdempotencyKey(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	body := `[{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea"},{"namespace":"user:bob","tier":"semantic","content":"Bob likes coffee"}]`
	first := mn.mustPost(t, body, "Idempotency-Key", "req-42")
	appends := mn.log.memoryAppends()
	second := mn.mustPost(t, body, "Idempotency-Key", "req-42")
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Errorf("the same request twice: ids %v then %v", first, second)
	}
	if got := mn.log.memoryAppends(); got != appends {
		t.Errorf("the request sent again appended %d times", got-appends)
	}
	for _, ns := range []string{"user:alice", "user:bob"} {
		if got := len(memoryEvents(t, mn.log, ns)); got != 1 {
			t.Errorf("%s: %d events; want 1", ns, got)
		}
	}
	// Another key is another request: the content is a duplicate, answered with the
	// same ids, and no memory is added: each namespace keeps the key's request
	// only (a memory.remembered), so that the key sent with another request is
	// refused wherever it is read.
	third := mn.mustPost(t, body, "Idempotency-Key", "req-43")
	if fmt.Sprint(first) != fmt.Sprint(third) {
		t.Errorf("a duplicate under another key: ids %v; want %v", third, first)
	}
	for _, ns := range []string{"user:alice", "user:bob"} {
		if events := memoryEvents(t, mn.log, ns); len(events) != 2 || events[1].Type != messages.TypeMemoryRemembered {
			t.Errorf("%s: %d events; want the add and the key's request", ns, len(events))
		}
	}
	if code, _, msg := mn.post(t, body, "Idempotency-Key", strings.Repeat("k", 201)); code != http.StatusBadRequest || msg == "" {
		t.Errorf("a 201-byte Idempotency-Key: %d %q", code, msg)
	}

	// The key of a request used for another: refused, nothing written.
	appends = mn.log.memoryAppends()
	code, ids, msg := mn.post(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice likes green tea"}`, "Idempotency-Key", "req-42")
	if code != http.StatusUnprocessableEntity || ids != nil || !strings.Contains(msg, "Idempotency-Key") {
		t.Errorf("a key used again for another request: %d %v %q; want 422 saying so", code, ids, msg)
	}
	if got := mn.log.memoryAppends(); got != appends {
		t.Errorf("the refused request appended %d times", got-appends)
	}

	// A request sent again after its memory was forgotten gets the ids it got first.
	ns, err := mn.n.Memories().Namespace(context.Background(), "user:bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Forget(context.Background(), "test/forget", first[1:], "Bob quit coffee"); err != nil {
		t.Fatal(err)
	}
	if again := mn.mustPost(t, body, "Idempotency-Key", "req-42"); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Errorf("the request sent again after a forget: ids %v; want %v", again, first)
	}
	if got := len(memoryEvents(t, mn.log, "user:bob")); got != 3 {
		t.Errorf("user:bob: %d events; want the add, req-43's request and the forget", got)
	}
}

func TestMemoryBadInputIsRefusedAndWritesNothing(t *testing.T) {
	mn := newMemoryNode(t, node.Config{Memory: &memory.Config{MaxContentBytes: 64}})
	obj := func(fields string) string {
		return `{"namespace":"user:alice","tier":"semantic",` + fields + `}`
	}
	cases := []struct {
		name, body string
		want       string // in the error
	}{
		{"malformed JSON", `{"namespace":"user:alice",`, "malformed"},
		{"empty body", ``, "empty"},
		{"empty array", `[]`, "empty array"},
		{"not an object", `"remember this"`, "object"},
		{"unknown field", obj(`"content":"x","colour":"red"`), "unknown field"},
		{"miscased field", `{"namespace":"user:alice","tier":"semantic","CONTENT":"x"}`, "case-sensitive"},
		{"duplicate field", obj(`"content":"x","content":"y"`), "duplicate field"},
		{"importance 1.5", obj(`"content":"x","importance":1.5`), "importance"},
		{"importance -0.1", obj(`"content":"x","importance":-0.1`), "importance"},
		{"importance NaN", obj(`"content":"x","importance":"NaN"`), "importance"},
		{"importance Infinity", obj(`"content":"x","importance":"Infinity"`), "importance"},
		{"tier longterm", `{"namespace":"user:alice","tier":"longterm","content":"x"}`, "longterm"},
		{"no tier", `{"namespace":"user:alice","content":"x"}`, "tier"},
		{"image outside perceptual", obj(`"content":"a cat","modality":"image"`), "perceptual"},
		{"unknown modality", `{"namespace":"user:alice","tier":"perceptual","content":"a cat","modality":"smell"}`, "smell"},
		{"metadata not an object", obj(`"content":"x","metadata":["a"]`), "metadata"},
		{"metadata a string", obj(`"content":"x","metadata":"{}"`), "metadata"},
		{"timestamp not RFC 3339", obj(`"content":"x","timestamp":"03/05/2026"`), "RFC 3339"},
		{"empty content", obj(`"content":"  "`), "empty content"},
		{"namespace with a slash", `{"namespace":"user/alice","tier":"semantic","content":"x"}`, "namespace"},
		{"namespace of 200 chars", `{"namespace":"` + strings.Repeat("n", 200) + `","tier":"semantic","content":"x"}`, "namespace"},
		{"no namespace", `{"tier":"semantic","content":"x"}`, "namespace"},
		{"content past MaxContentBytes", obj(`"content":"` + strings.Repeat("long ", 20) + `"`), "content"},
		{"data after the value", obj(`"content":"x"`) + ` {}`, ""},
		{"a bad one in a good array", `[` + obj(`"content":"fine"`) + `,` + obj(`"content":"x","importance":2`) + `]`, "memory 1"},
		{"more than MaxInputs", `[` + strings.Repeat(obj(`"content":"x"`)+`,`, memory.MaxInputs) + obj(`"content":"x"`) + `]`, "at most"},
		// Not repaired into another text (encoding/json would put U+FFFD in its place).
		{"content not UTF-8", obj("\"content\":\"bad \xff byte\""), "not valid UTF-8 (byte 59, 0xff)"},
		{"namespace not UTF-8", "{\"namespace\":\"user:\xe9\",\"tier\":\"semantic\",\"content\":\"x\"}", "not valid UTF-8"},
		{"content with half a surrogate pair", obj(`"content":"smile \ud83d"`), `\ud83d at byte`},
		// Binary (a piece of an executable) is no memory, as it is no document.
		{"content with a NUL", obj(`"content":"\u007fELF\u0002\u0001\u0001\u0000\u0000 ls"`), "NUL byte (at byte 7)"},
		{"a NUL in a good array", `[` + obj(`"content":"fine"`) + `,` + obj(`"content":"a\u0000b"`) + `]`, "memory 1: memory: invalid request: content holds a NUL byte (at byte 1)"},
		{"content past MaxContentBytes in a good array", `[` + obj(`"content":"fine"`) + `,` + obj(`"content":"`+strings.Repeat("long ", 20)+`"`) + `]`, "content"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, ids, msg := mn.post(t, c.body)
			if code != http.StatusBadRequest || ids != nil || msg == "" {
				t.Fatalf("%s: %d ids %v %q; want 400 with a reason", c.body, code, ids, msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("the reason %q does not say %q", msg, c.want)
			}
		})
	}

	// Not JSON: 415.
	code, b := mn.do(t, http.MethodPost, "/v1/memories", "text/plain", strings.NewReader(`{"namespace":"user:alice","tier":"semantic","content":"x"}`))
	if code != http.StatusUnsupportedMediaType || !bytes.Contains(b, []byte("application/json")) {
		t.Errorf("text/plain: %d %s", code, b)
	}
	code, b = mn.do(t, http.MethodPost, "/v1/memories", "", strings.NewReader(`{}`))
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("no Content-Type: %d %s", code, b)
	}
	// Over the body limit, declared or streamed: 413.
	req := httptest.NewRequest(http.MethodPost, "/v1/memories", strings.NewReader("[]"))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = 64 << 20
	rec := httptest.NewRecorder()
	mn.n.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a declared body of 64 MiB: %d %s", rec.Code, rec.Body.Bytes())
	}
	big := io.MultiReader(strings.NewReader(`[{"namespace":"user:alice","tier":"semantic","content":"`), zeros{}) // endless
	req = httptest.NewRequest(http.MethodPost, "/v1/memories", big)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	rec = httptest.NewRecorder()
	mn.n.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("an endless streamed body: %d %s", rec.Code, rec.Body.Bytes())
	}

	if got := mn.log.memoryAppends(); got != 0 {
		t.Errorf("refused requests appended %d times", got)
	}
	names, err := mn.n.Memories().Namespaces(context.Background())
	if err != nil || len(names) != 0 {
		t.Errorf("refused requests left namespaces %v (%v)", names, err)
	}
}

// zeros is an endless body of 'a's.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// trickle sends a memory body one byte per pause, and tells when the server stopped
// reading it.
type trickle struct {
	body  []byte
	pause time.Duration
	done  <-chan struct{}
}

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.body) == 0 {
		return 0, io.EOF
	}
	select {
	case <-time.After(r.pause):
	case <-r.done:
		return 0, io.ErrUnexpectedEOF
	}
	p[0] = r.body[0]
	r.body = r.body[1:]
	return 1, nil
}

// A body that arrives slower than the read timeout is cut by the server: the client
// gets an answer or a closed connection, nothing is written, and the goroutines of
// the request end.
func TestMemorySlowBodyIsCutByTheServer(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := newCountingLog(base)
	n, addr, _ := serveHTTP(t, node.Config{Log: log, Memory: &memory.Config{},
		HTTP: node.HTTPConfig{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 2 * time.Second}})

	settle := func() int {
		runtime.GC()
		return runtime.NumGoroutine()
	}
	before := settle()
	stop := make(chan struct{})
	defer close(stop)
	tr := &http.Transport{DisableKeepAlives: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := &trickle{body: []byte(`{"namespace":"user:alice","tier":"semantic","content":"slowly, slowly"}`), pause: 100 * time.Millisecond, done: stop}
	req, err := http.NewRequest(http.MethodPost, addr+"/v1/memories", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a body slower than the read timeout: %d %s", resp.StatusCode, b)
		}
		t.Logf("a body slower than the read timeout: %d %s", resp.StatusCode, bytes.TrimSpace(b))
	} else {
		t.Logf("a body slower than the read timeout: %v", err)
	}
	tr.CloseIdleConnections()
	if got := log.memoryAppends(); got != 0 {
		t.Errorf("a cut request appended %d times", got)
	}
	if names, _ := n.Memories().Namespaces(context.Background()); len(names) != 0 {
		t.Errorf("a cut request left namespaces %v", names)
	}
	// The request's goroutines (the server's connection, the client's) end. Other
	// goroutines of the process come and go, so allow a little slack, with a deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := settle()
		if now <= before+1 {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before the slow request, %d after it:\n%s", before, now, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slowEmbedder takes pause over each call: an embeddings service under load.
type slowEmbedder struct {
	pause time.Duration
}

func (e slowEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	select {
	case <-time.After(e.pause):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

// A write whose body was read in time but whose memories take longer than the
// server's write timeout to embed and append (a batch of 10,000 with a remote
// embedder, a namespace busy with its consolidation) is answered: the memories are
// written, so the client must get their IDs, not a closed connection it would take
// for a failure.
func TestMemoryWriteSlowerThanTheWriteTimeoutIsAnswered(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	const writeTimeout = 200 * time.Millisecond
	n, addr, _ := serveHTTP(t, node.Config{Log: base, Memory: &memory.Config{Embedder: slowEmbedder{pause: 4 * writeTimeout}},
		HTTP: node.HTTPConfig{WriteTimeout: writeTimeout}})

	client := &http.Client{Timeout: 30 * time.Second} // a hang guard
	body := `[{"namespace":"user:alice","tier":"semantic","content":"Alice lives in Lisbon"},
		{"namespace":"user:alice","tier":"episodic","content":"Alice ran the Lisbon half marathon"}]`
	resp, err := client.Post(addr+"/v1/memories", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("a write slower than the write timeout got no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		IDs []string `json:"ids"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &got) != nil || len(got.IDs) != 2 {
		t.Fatalf("a write slower than the write timeout: %d %s", resp.StatusCode, b)
	}
	ns, err := n.Memories().Namespace(context.Background(), "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range got.IDs {
		if _, ok := ns.Get(id); !ok {
			t.Errorf("memory %s answered but not stored", id)
		}
	}
}

func TestMemorySearch(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	ids := mn.mustPost(t, `[
		{"namespace":"user:alice","tier":"semantic","content":"Alice prefers aisle seats on long flights","importance":0.9,"metadata":{"source":"crm"}},
		{"namespace":"user:alice","tier":"episodic","content":"Alice booked a window seat once and regretted it","timestamp":"2026-05-03T10:00:00Z"},
		{"namespace":"user:alice","tier":"semantic","content":"Alice's favourite colour is green"},
		{"namespace":"user:bob","tier":"semantic","content":"Bob prefers aisle seats too"}
	]`)

	code, ans := mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"aisle seats"}})
	if code != http.StatusOK || len(ans.Results) == 0 {
		t.Fatalf("search: %d %+v", code, ans)
	}
	top := ans.Results[0]
	if top.ID != ids[0] || top.Tier != "semantic" || top.Content != "Alice prefers aisle seats on long flights" ||
		string(top.Metadata) != `{"source":"crm"}` || top.Timestamp.IsZero() || top.Score <= 0 {
		t.Errorf("the best result: %+v", top)
	}
	for i, r := range ans.Results {
		if r.ID == ids[3] {
			t.Errorf("a search of user:alice found bob's memory %s", r.ID)
		}
		if i > 0 && r.Score > ans.Results[i-1].Score {
			t.Errorf("result %d scores %v, more than the one before it (%v)", i, r.Score, ans.Results[i-1].Score)
		}
		if len(r.Metadata) == 0 || r.Metadata[0] != '{' {
			t.Errorf("result %d: metadata %s; want an object", i, r.Metadata)
		}
	}

	// Tiers, limit and mode.
	code, ans = mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"seat"}, "tier": {"episodic"}})
	if code != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].ID != ids[1] || ans.Results[0].Timestamp.Format(time.RFC3339) != "2026-05-03T10:00:00Z" {
		t.Errorf("tier=episodic: %d %+v", code, ans)
	}
	code, ans = mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"Alice"}, "tier": {"semantic, episodic"}, "limit": {"2"}, "mode": {"keyword"}})
	if code != http.StatusOK || len(ans.Results) != 2 {
		t.Errorf("limit=2: %d %+v", code, ans)
	}
	code, ans = mn.search(t, url.Values{"namespace": {"user:nobody"}, "q": {"anything"}})
	if code != http.StatusOK || ans.Results == nil || len(ans.Results) != 0 {
		t.Errorf("an empty namespace: %d %+v; want 200 with an empty list", code, ans)
	}

	for _, bad := range []url.Values{
		{"q": {"seat"}},
		{"namespace": {"user:alice"}},
		{"namespace": {"user:alice"}, "q": {"  "}},
		{"namespace": {"user/alice"}, "q": {"seat"}},
		{"namespace": {"user:alice"}, "q": {"seat"}, "limit": {"0"}},
		{"namespace": {"user:alice"}, "q": {"seat"}, "limit": {"101"}},
		{"namespace": {"user:alice"}, "q": {"seat"}, "limit": {"ten"}},
		{"namespace": {"user:alice"}, "q": {"seat"}, "tier": {"longterm"}},
		{"namespace": {"user:alice"}, "q": {"seat"}, "tier": {"semantic,"}},
		{"namespace": {"user:alice"}, "q": {"seat"}, "mode": {"fuzzy"}},
		{"namespace": {"user:alice"}, "q": {strings.Repeat("q", 9<<10)}},
	} {
		code, ans := mn.search(t, bad)
		if code != http.StatusBadRequest || ans.Error == "" {
			t.Errorf("search %s: %d %+v; want 400 with a reason", bad.Encode(), code, ans)
		}
	}
}

func TestMemoryHistory(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	ids := mn.mustPost(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice lives in Porto"}`)

	for _, ns := range []string{"", "user:alice"} {
		code, h := mn.history(t, ids[0], ns)
		if code != http.StatusOK || h.ID != ids[0] || h.Namespace != "user:alice" || len(h.History) != 1 {
			t.Fatalf("history (namespace %q): %d %+v", ns, code, h)
		}
		c := h.History[0]
		if c.Type != messages.TypeMemoryAdded || c.Reason == "" || c.Memory == nil || c.Memory.Content != "Alice lives in Porto" {
			t.Errorf("the added event: %+v", c)
		}
	}
	for _, ns := range []string{"", "user:alice", "user:bob"} {
		if code, h := mn.history(t, "m_unknown", ns); code != http.StatusNotFound || h.Error == "" {
			t.Errorf("an unknown id (namespace %q): %d %+v", ns, code, h)
		}
	}
	if code, h := mn.history(t, ids[0], "user/alice"); code != http.StatusBadRequest || h.Error == "" {
		t.Errorf("a bad namespace: %d %+v", code, h)
	}

	// Forgotten through the namespace (as the tool and the consolidator do): the
	// history ends with why.
	ns, err := mn.n.Memories().Namespace(context.Background(), "user:alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Forget(context.Background(), "test/forget", ids, "Alice moved to Lisbon"); err != nil {
		t.Fatal(err)
	}
	code, h := mn.history(t, ids[0], "")
	if code != http.StatusOK || len(h.History) != 2 {
		t.Fatalf("history after forgetting: %d %+v", code, h)
	}
	if last := h.History[1]; last.Type != messages.TypeMemoryForgotten || last.Reason != "Alice moved to Lisbon" || last.Memory != nil {
		t.Errorf("the forgotten event: %+v", last)
	}
	if _, ans := mn.search(t, url.Values{"namespace": {"user:alice"}, "q": {"Porto"}}); len(ans.Results) != 0 {
		t.Errorf("a forgotten memory is found: %+v", ans.Results)
	}
}

// outcomes collects the consolidator's runs on a node.
type outcomes chan consolidator.Outcome

func (o outcomes) next(t *testing.T, namespace string) consolidator.Outcome {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case out := <-o:
			if out.Namespace != namespace {
				continue
			}
			if out.Err != nil {
				t.Fatalf("the consolidator of %s failed: %v", namespace, out.Err)
			}
			return out
		case <-timeout:
			t.Fatalf("the consolidator of %s did not run within 10 s", namespace)
		}
	}
}

// Writes past Threshold wake the namespace's consolidator: the important working
// memory is promoted to episodic, the near-duplicate merged, and the history of each
// says why.
func TestMemoryConsolidationWakesOnWrites(t *testing.T) {
	runs := make(outcomes, 16)
	var written atomic.Int64
	mn := newMemoryNode(t, node.Config{MemoryWritten: func(_ string, n int) { written.Add(int64(n)) }, Consolidation: &consolidator.SchedulerConfig{
		Threshold: 3, Interval: -1, OnRun: func(o consolidator.Outcome) { runs <- o }}})

	ids := mn.mustPost(t, `[{"namespace":"user:dana","tier":"working","content":"Dana must renew her passport before the trip","importance":0.9},
		{"namespace":"user:dana","tier":"working","content":"Dana asked about the weather","importance":0.3}]`)
	if got := written.Load(); got != 2 {
		t.Fatalf("the node heard of %d memories written; want 2", got)
	}
	more := mn.mustPost(t, `{"namespace":"user:dana","tier":"semantic","content":"Dana prefers trains to planes"}`)
	out := runs.next(t, "user:dana")
	if !strings.HasPrefix(out.Cause, "threshold: 3 written") || out.Report.Promoted != 1 {
		t.Fatalf("the run: cause %q, report %+v; want a threshold run that promoted 1", out.Cause, out.Report)
	}

	var promoted int
	for _, e := range memoryEvents(t, mn.log, "user:dana") {
		if e.Type == messages.TypeMemoryPromoted {
			promoted++
		}
	}
	if promoted != 1 {
		t.Errorf("%d memory.promoted events; want 1", promoted)
	}
	code, h := mn.history(t, ids[0], "")
	if code != http.StatusOK || len(h.History) != 2 {
		t.Fatalf("history of the promoted memory: %d %+v", code, h)
	}
	if last := h.History[1]; last.Type != messages.TypeMemoryPromoted || last.Reason == "" || last.Memory == nil || last.Memory.Tier != memory.Episodic {
		t.Errorf("the promotion in the history: %+v", last)
	}
	ns, err := mn.n.Memories().Namespace(context.Background(), "user:dana")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := ns.Get(ids[1]); !ok || m.Tier != memory.Working {
		t.Errorf("the unimportant working memory: %+v %v; want it left in working", m, ok)
	}
	if _, ok := ns.Get(more[0]); !ok {
		t.Error("the semantic memory is gone")
	}

	// Three more writes wake it again: the near-duplicate is merged into the memory
	// it repeats, and its history says into which, and why. The offline embedder is
	// lexical: the same words score 1; one word more ("…, always": 0.91) is no
	// duplicate in a tier of three, whose floor leans on the prior.
	dup := mn.mustPost(t, `[{"namespace":"user:dana","tier":"semantic","content":"Dana prefers trains to planes.","metadata":{"source":"chat"}},
		{"namespace":"user:dana","tier":"episodic","content":"Dana took the night train to Vienna"},
		{"namespace":"user:dana","tier":"semantic","content":"Dana is allergic to cats"}]`)
	out = runs.next(t, "user:dana")
	if out.Report.Merged != 1 {
		t.Fatalf("the second run: %+v; want 1 merged", out.Report)
	}
	kept, gone := more[0], dup[0]
	if _, ok := ns.Get(kept); !ok {
		kept, gone = gone, kept
	}
	code, h = mn.history(t, gone, "user:dana")
	if code != http.StatusOK || len(h.History) != 2 {
		t.Fatalf("history of the merged memory: %d %+v", code, h)
	}
	if last := h.History[1]; last.Type != messages.TypeMemoryMerged || last.Reason == "" || !slices.Contains(last.Related, kept) {
		t.Errorf("the merge in the history of %s: %+v; want memory.merged into %s with a reason", gone, last, kept)
	}
	// The memory kept holds the metadata of both.
	_, ans := mn.search(t, url.Values{"namespace": {"user:dana"}, "q": {"trains planes"}, "tier": {"semantic"}})
	if len(ans.Results) == 0 || ans.Results[0].ID != kept || !strings.Contains(string(ans.Results[0].Metadata), "chat") {
		t.Errorf("the merged memory: %+v", ans.Results)
	}
}

// The memory tool's writes count toward the threshold as the API's do.
func TestMemoryConsolidationWakesOnToolWrites(t *testing.T) {
	runs := make(outcomes, 16)
	mn := newMemoryNode(t, node.Config{
		Consolidation: &consolidator.SchedulerConfig{Threshold: 1, Interval: -1, OnRun: func(o consolidator.Outcome) { runs <- o }},
		MemoryTool:    &memory.ToolConfig{Namespace: "agent:planner"},
		Model: script(t,
			llm.ScriptStep{ToolCalls: []messages.ToolCall{memoryCall("c1", "add", `{"content":"Check the visa rules first","tier":"working","importance":0.95}`)}},
			llm.ScriptStep{Content: "noted"},
		),
	})
	nodetest.Run(t, mn.n, "plan-1", "plan the trip")
	out := runs.next(t, "agent:planner")
	if out.Report.Promoted != 1 {
		t.Errorf("the run woken by the tool's write: %+v; want 1 promoted", out.Report)
	}
}

// A node consolidates on the schedule every namespace it uses, not only those written
// to since it started: a namespace whose node stopped (or was killed midway through a
// run) before its consolidator ran, searched after the restart, is maintained with
// no write to wake it, and the run applies each change once.
func TestMemoryConsolidationScheduleCoversTheNamespacesUsed(t *testing.T) {
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	// What a node left behind: an important working memory, not yet promoted.
	vs, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vs.Close() })
	before, err := memory.Open(memory.Config{Log: lg, Vectors: vs, Embedder: &countingEmbedder{}})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := before.Namespace(ctx, "user:erin")
	if err != nil {
		t.Fatal(err)
	}
	imp := 0.9
	res, err := ns.Add(ctx, "left-behind", []memory.AddRequest{{Tier: memory.Working, Content: "Erin must renew her passport", Importance: &imp}})
	if err != nil {
		t.Fatal(err)
	}

	runs := make(outcomes, 16)
	n := nodetest.Start(t, node.Config{Log: lg, Memory: &memory.Config{Embedder: &countingEmbedder{}},
		Consolidation: &consolidator.SchedulerConfig{Interval: 20 * time.Millisecond, Threshold: -1,
			OnRun: func(o consolidator.Outcome) { runs <- o }}})
	mn := memoryNode{n: n}
	if code, ans := mn.search(t, url.Values{"namespace": {"user:erin"}, "q": {"passport"}}); code != http.StatusOK || len(ans.Results) != 1 {
		t.Fatalf("search: %d %+v", code, ans)
	}
	out := runs.next(t, "user:erin")
	if !strings.HasPrefix(out.Cause, "schedule:") || out.Report.Promoted != 1 {
		t.Fatalf("the first run: cause %q, report %+v; want a scheduled run that promoted 1", out.Cause, out.Report)
	}
	if out = runs.next(t, "user:erin"); out.Report.Promoted != 0 || len(out.Report.Decisions) != 0 {
		t.Fatalf("the next run: %+v; want nothing left to do", out.Report)
	}
	h, err := node.MemoryHistory(ctx, n.Memories(), "", res[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var types []messages.Type
	for _, c := range h.History {
		types = append(types, c.Type)
	}
	if want := []messages.Type{messages.TypeMemoryAdded, messages.TypeMemoryPromoted}; !slices.Equal(types, want) {
		t.Fatalf("the history of %s: %v; want %v", res[0].ID, types, want)
	}
}

// readCountingLog counts the reads of memory streams.
type readCountingLog struct {
	eventlog.Log
	reads atomic.Int64
}

func (l *readCountingLog) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	if memory.IsStream(id) {
		l.reads.Add(1)
	}
	return l.Log.Read(ctx, id, from)
}

// The history of a memory asked for without its namespace reads the namespace that
// holds it, not every namespace of the log: once the first lookup indexed the IDs,
// a memory is found by reading its own stream, and an unknown ID reads none. A
// memory written through this process after the index was built is found at once,
// one another process wrote soon after.
func TestMemoryHistoryWithoutNamespaceReadsOneNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir(), Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	lg := &readCountingLog{Log: base}
	open := func() *memory.Memories {
		vs, err := vectorstore.Open(vectorstore.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = vs.Close() })
		m, err := memory.Open(memory.Config{Log: lg, Vectors: vs, Embedder: &countingEmbedder{}})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := open()
	add := func(m *memory.Memories, ns, content string) string {
		t.Helper()
		space, err := m.Namespace(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		res, err := space.Add(ctx, "", []memory.AddRequest{{Tier: memory.Semantic, Content: content}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].ID
	}
	const spaces = 100
	ids := make([]string, spaces)
	for i := range spaces {
		ids[i] = add(m, fmt.Sprintf("user:u%03d", i), fmt.Sprintf("user %d drinks tea", i))
	}
	if h, err := node.MemoryHistory(ctx, m, "", ids[50]); err != nil || h.Namespace != "user:u050" || len(h.History) != 1 {
		t.Fatalf("history of %s: %+v, %v", ids[50], h, err)
	}
	lg.reads.Store(0)
	for i := range 200 {
		if _, err := node.MemoryHistory(ctx, m, "", fmt.Sprintf("m_%016x", i)); !errors.Is(err, memory.ErrNotFound) {
			t.Fatalf("an unknown ID: %v; want ErrNotFound", err)
		}
	}
	for i := range 20 {
		if h, err := node.MemoryHistory(ctx, m, "", ids[i*5]); err != nil || h.Namespace != fmt.Sprintf("user:u%03d", i*5) {
			t.Fatalf("history of %s: %+v, %v", ids[i*5], h, err)
		}
	}
	if got := lg.reads.Load(); got > 20 {
		t.Fatalf("200 lookups of unknown IDs and 20 of known ones read %d memory streams; want at most 20 (one per memory found)", got)
	}
	// Written here after the index was built: found at once.
	mine := add(m, "user:late", "Late drinks coffee")
	if h, err := node.MemoryHistory(ctx, m, "", mine); err != nil || h.Namespace != "user:late" {
		t.Fatalf("history of %s, written here: %+v, %v", mine, h, err)
	}
	// Written by another process on the same log: found once the index catches up.
	theirs := add(open(), "user:u007", "user 7 also drinks mate")
	for {
		h, err := node.MemoryHistory(ctx, m, "", theirs)
		if err == nil && h.Namespace == "user:u007" && len(h.History) == 1 {
			break
		}
		if !errors.Is(err, memory.ErrNotFound) {
			t.Fatalf("history of %s, written by another process: %+v, %v", theirs, h, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("history of %s, written by another process: never found", theirs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A node with memory and a consolidator closes without waiting out the
// consolidator's CloseTimeout: the node stops its actor system first, and the
// scheduler in it must not wait for an answer the stopped system never gives.
func TestMemoryNodeClosesWithoutWaitingForTheConsolidator(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	for i := range 6 {
		n, err := node.New(ctx, node.Config{DataDir: data, Memory: &memory.Config{Embedder: &countingEmbedder{}},
			// A bound far above a stop's time on a loaded machine: a Close that
			// waited it out would fail with ErrCloseTimeout all the same.
			Consolidation: &consolidator.SchedulerConfig{CloseTimeout: 30 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := node.AddMemories(ctx, n.Memories(), fmt.Sprint("k", i), []memory.Input{{Namespace: "user:bob", Tier: "semantic", Content: "Bob likes jazz"},
			{Namespace: "user:bob", Tier: "semantic", Content: fmt.Sprintf("Bob went to Porto %d times", i)}, {Namespace: fmt.Sprintf("user:c%d", i), Tier: "semantic", Content: "Carol sings"}}, "test"); err != nil {
			t.Fatal(err)
		}
		if err := n.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
}
