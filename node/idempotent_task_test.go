package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// postKeyed posts a task body with an Idempotency-Key and returns the status and
// the answer's session_id (or error).
func postKeyed(t *testing.T, base, key, body string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/tasks", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]string{}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// countTasks is how many task.submitted events session id holds.
func countTasks(t *testing.T, n *node.Node, id string) int {
	t.Helper()
	evs, err := n.Log().Read(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, e := range evs {
		if e.Type == messages.TypeTaskSubmitted {
			c++
		}
	}
	return c
}

// A client whose answer to POST /v1/tasks was lost sends the request again with the
// same Idempotency-Key: it is the same task of the same session, run once, also
// after the node restarted in between. Another body under the key is another task;
// no key, as before, is a new task each time.
func TestTaskIdempotencyKey(t *testing.T) {
	dir := t.TempDir()
	start := func() (*node.Node, *httptest.Server, func()) {
		n, err := node.New(context.Background(), node.Config{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		select {
		case <-n.Running():
		case err := <-done:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("node did not start")
		}
		srv := httptest.NewServer(n.Handler())
		return n, srv, func() {
			n.CloseStreams()
			srv.Close()
			cancel()
			if err := n.Close(); err != nil {
				t.Error(err)
			}
			<-done
		}
	}
	const body = `{"input":"What is 6 * 7?"}`
	n, srv, stop := start()
	code, first := postKeyed(t, srv.URL, "order-1234", body)
	if code != http.StatusAccepted || first["session_id"] == "" {
		t.Fatalf("first POST: %d %v", code, first)
	}
	waitDone(t, srv.URL, first["session_id"])
	code, again := postKeyed(t, srv.URL, "order-1234", body)
	if code != http.StatusAccepted || again["session_id"] != first["session_id"] {
		t.Fatalf("the same request again: %d %v, want 202 and session %s", code, again, first["session_id"])
	}
	if c := countTasks(t, n, first["session_id"]); c != 1 {
		t.Errorf("session %s holds %d tasks after the request was sent twice, want 1", first["session_id"], c)
	}
	// A body naming its session: sent twice, one task of that session.
	named := `{"input":"What is 2 + 2?","session_id":"s-idem"}`
	for i := 0; i < 2; i++ {
		if code, out := postKeyed(t, srv.URL, "order-5678", named); code != http.StatusAccepted || out["session_id"] != "s-idem" {
			t.Fatalf("keyed request naming its session, round %d: %d %v", i, code, out)
		}
		waitDone(t, srv.URL, "s-idem")
	}
	if c := countTasks(t, n, "s-idem"); c != 1 {
		t.Errorf("s-idem holds %d tasks, want 1", c)
	}
	// Another body under a key used before is another task, in another session.
	code, other := postKeyed(t, srv.URL, "order-1234", `{"input":"What is 7 * 7?"}`)
	if code != http.StatusAccepted || other["session_id"] == first["session_id"] {
		t.Fatalf("another body under the same key: %d %v, want 202 and a session other than %s", code, other, first["session_id"])
	}
	// A key too long is refused.
	if code, out := postKeyed(t, srv.URL, strings.Repeat("k", node.MaxIdempotencyKey+1), body); code != http.StatusBadRequest || !strings.Contains(out["error"], "Idempotency-Key") {
		t.Errorf("a key of %d bytes: %d %v, want 400 naming the Idempotency-Key", node.MaxIdempotencyKey+1, code, out)
	}
	stop()

	// After a restart (the session passivated, its actor gone), the request sent
	// again is still the task recorded before.
	n, srv, stop = start()
	defer stop()
	code, late := postKeyed(t, srv.URL, "order-1234", body)
	if code != http.StatusAccepted || late["session_id"] != first["session_id"] {
		t.Fatalf("the request again after a restart: %d %v, want session %s", code, late, first["session_id"])
	}
	// 202 comes once the task is recorded: a second one would be in the log now.
	if c := countTasks(t, n, first["session_id"]); c != 1 {
		t.Errorf("after a restart, session %s holds %d tasks, want 1", first["session_id"], c)
	}
	if r := waitDone(t, srv.URL, first["session_id"]); r.Output != "42" {
		t.Errorf("output %q, want 42", r.Output)
	}
	// Without a key, the same body is a new task each time.
	_, a := postKeyed(t, srv.URL, "", body)
	_, b := postKeyed(t, srv.URL, "", body)
	if a["session_id"] == b["session_id"] {
		t.Errorf("two requests without a key share session %s", a["session_id"])
	}
}
