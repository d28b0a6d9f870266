package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestMemoryIdempotencyKeyNamesOneRequest: an Idempotency-Key names one request
// (Stripe's rule). Sent again with the same request it gets the first answer;
// sent with another one (another namespace, the same content with other metadata,
// tier or importance) it is refused, 422 "Idempotency-Key reused with a different
// request", and nothing is written. Before, a key first used for user:alice, sent
// for user:bob, wrote to user:bob and was answered 201; and the same content with
// other metadata under the key was answered with the first request's ID while its
// metadata was dropped. The refusal holds after a restart, from the namespace's
// events.
func TestMemoryIdempotencyKeyNamesOneRequest(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	data := t.TempDir()
	start := func() (memoryNode, string, func()) {
		mn := memoryNode{log: newCountingLog(lg), emb: &countingEmbedder{}}
		n, stop := nodetest.StartWithStop(t, node.Config{Log: mn.log, DataDir: data, Memory: &memory.Config{Embedder: mn.emb}})
		mn.n = n
		srv := httptest.NewServer(n.Handler())
		return mn, srv.URL, func() { srv.Close(); stop() }
	}
	post := func(base, body, key string) (int, []string, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/v1/memories", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out struct {
			IDs   []string `json:"ids"`
			Error string   `json:"error"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("POST /v1/memories: %d %q: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, out.IDs, out.Error
	}
	alice := `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"chat"}}`
	refused := func(mn memoryNode, base, what, body string) {
		t.Helper()
		appends := mn.log.memoryAppends()
		code, ids, msg := post(base, body, "key-1")
		if code != http.StatusUnprocessableEntity || ids != nil || !strings.Contains(msg, "Idempotency-Key reused with a different request") {
			t.Errorf("%s under the key of another request: %d %v %q; want 422 saying the key was reused", what, code, ids, msg)
		}
		if got := mn.log.memoryAppends(); got != appends {
			t.Errorf("%s: the refused request appended %d times", what, got-appends)
		}
	}

	mn, base, stop := start()
	first := func() []string {
		code, ids, msg := post(base, alice, "key-1")
		if code != http.StatusCreated || len(ids) != 1 {
			t.Fatalf("the first request: %d %v %s", code, ids, msg)
		}
		return ids
	}()
	// The same request again, with other whitespace: the first answer.
	if code, ids, msg := post(base, " {\"namespace\":\"user:alice\", \"tier\":\"semantic\",\"content\":\"Alice likes tea\",\"metadata\":{ \"src\": \"chat\" }}", "key-1"); code != http.StatusCreated || len(ids) != 1 || ids[0] != first[0] {
		t.Errorf("the same request again: %d %v %q; want 201 %v", code, ids, msg, first)
	}
	refused(mn, base, "another namespace", `{"namespace":"user:bob","tier":"semantic","content":"Bob likes coffee"}`)
	if got := len(memoryEvents(t, lg, "user:bob")); got != 0 {
		t.Errorf("user:bob holds %d events of the refused request", got)
	}
	refused(mn, base, "other metadata", `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"email"}}`)
	refused(mn, base, "another tier", `{"namespace":"user:alice","tier":"episodic","content":"Alice likes tea","metadata":{"src":"chat"}}`)
	stop()

	// After a restart the namespace's events still tell the key's request.
	mn, base, stop = start()
	defer stop()
	refused(mn, base, "after a restart, other metadata", `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea","metadata":{"src":"email"}}`)
	if code, ids, msg := post(base, alice, "key-1"); code != http.StatusCreated || len(ids) != 1 || ids[0] != first[0] {
		t.Errorf("after a restart, the same request again: %d %v %q; want 201 %v", code, ids, msg, first)
	}
}

// A first request under an Idempotency-Key that added nothing (every memory of it
// stored already) kept nothing of the key: after a restart (or on another node),
// the key sent with another request was answered 201 and wrote it. The key's
// request is kept in the namespace's events (one memory.remembered, however often
// the request is sent): the other request is refused, 422, and writes nothing; the
// same request again is answered with the memory it found.
func TestMemoryIdempotencyKeyOfARequestThatAddedNothing(t *testing.T) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	data := t.TempDir()
	start := func() (memoryNode, func()) {
		mn := memoryNode{log: newCountingLog(lg), emb: &countingEmbedder{}}
		n, stop := nodetest.StartWithStop(t, node.Config{Log: mn.log, DataDir: data, Memory: &memory.Config{Embedder: mn.emb}})
		mn.n = n
		return mn, stop
	}
	alice := `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea"}`
	cake := `{"namespace":"user:alice","tier":"semantic","content":"Alice likes cake"}`
	mn, stop := start()
	first := mn.mustPost(t, alice)
	for range 2 {
		if ids := mn.mustPost(t, alice, "Idempotency-Key", "key-dup"); len(ids) != 1 || ids[0] != first[0] {
			t.Fatalf("the stored memory under a key: %v, want %v", ids, first)
		}
	}
	stop()

	mn, stop = start()
	defer stop()
	appends := mn.log.memoryAppends()
	if code, ids, msg := mn.post(t, cake, "Idempotency-Key", "key-dup"); code != http.StatusUnprocessableEntity || !strings.Contains(msg, "Idempotency-Key reused with a different request") {
		t.Errorf("after a restart, another request under the key: %d %v %q; want 422 saying the key was reused", code, ids, msg)
	}
	if got := mn.log.memoryAppends(); got != appends {
		t.Errorf("the refused request appended %d times", got-appends)
	}
	if ids := mn.mustPost(t, alice, "Idempotency-Key", "key-dup"); len(ids) != 1 || ids[0] != first[0] {
		t.Errorf("after a restart, the same request again: %v, want %v", ids, first)
	}
	var marks int
	for _, e := range memoryEvents(t, lg, "user:alice") {
		switch e.Type {
		case messages.TypeMemoryRemembered:
			marks++
		case messages.TypeMemoryAdded:
		default:
			t.Errorf("event %d: %s", e.Seq, e.Type)
		}
	}
	if marks != 1 {
		t.Errorf("%d memory.remembered events, want 1 (the key's request, kept once)", marks)
	}
}

// A node pinned to decision rules before 12 for a rolling upgrade writes no
// memory.remembered, which the builds of those rules cannot fold (as its write
// after task writes none: actors.MarksRemembered): a request under an
// Idempotency-Key whose every memory is stored already wrote one all the same,
// and the namespace no longer folded on the nodes not yet upgraded. It writes
// nothing, as before the mark, and is answered with the memory it found.
func TestMemoryIdempotencyKeyOnANodePinnedBeforeTheMark(t *testing.T) {
	mn := newMemoryNode(t, node.Config{DecisionRules: 11})
	alice := `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea"}`
	first := mn.mustPost(t, alice)
	if ids := mn.mustPost(t, alice, "Idempotency-Key", "key-dup"); len(ids) != 1 || ids[0] != first[0] {
		t.Fatalf("the stored memory under a key: %v, want %v", ids, first)
	}
	for _, e := range memoryEvents(t, mn.log, "user:alice") {
		if e.Type == messages.TypeMemoryRemembered {
			t.Errorf("seq %d: a %s, which the builds of decision rules 11 cannot fold", e.Seq, e.Type)
		}
	}
}
