package node_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestTaskIdempotencyKeyThatCannotBeUsedIsRefused: a task request that carries an
// Idempotency-Key asks to be run once however often it is sent. A key the node
// cannot use as such is refused (400, naming the header), never dropped: an empty
// one (a client whose key came out blank: `{"Idempotency-Key": key ?? ""}`) made
// every retry another task, run again, and of two keys (a client's and its
// retrying middleware's) the first was taken, where a proxy or another server
// takes the last, so that a retry sent with them in another order was another
// task too.
func TestTaskIdempotencyKeyThatCannotBeUsedIsRefused(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"blank", []string{"   "}},
		{"two", []string{"key-a", "key-b"}},
		{"the same twice", []string{"key-c", "key-c"}},
		// As a proxy joins a header given twice (RFC 9110, section 5.3): taken as
		// the literal key "key-d, key-d", which the same request sent without
		// the proxy did not match.
		{"the same twice joined", []string{"key-d, key-d"}},
		{"two joined", []string{"key-e,key-f"}},
		// A quote inside a key, or one that opens no closed string, quotes
		// nothing: joined, they are two keys.
		{"a key with a quote joined", []string{`key"g, key"h`}},
		{"a key opening a quote joined", []string{`"key-i, key-j`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "idem-header-" + strings.ReplaceAll(tc.name, " ", "-")
			req, err := http.NewRequest(http.MethodPost, api.URL+"/v1/tasks", strings.NewReader(`{"input":"what is 2+2","session_id":"`+session+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header["Idempotency-Key"] = tc.keys
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "Idempotency-Key") {
				t.Errorf("Idempotency-Key %q: %d %s, want 400 naming the header", tc.keys, resp.StatusCode, b)
			}
			if events, err := eventlog.ReadPage(context.Background(), n.Log(), session, 1, 1); err != nil || len(events) > 0 {
				t.Errorf("Idempotency-Key %q: the session has events (%v, %v): the refused task was recorded", tc.keys, events, err)
			}
		})
	}
	// A key given once still makes the task run once; a comma inside a quoted
	// string is the key's own.
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/tasks", strings.NewReader(`{"input":"what is 2+2","session_id":"idem-header-quoted"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"key, quoted"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a quoted key with a comma: %d %s", resp.StatusCode, b)
		}
	}
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/tasks", strings.NewReader(`{"input":"what is 2+2","session_id":"idem-header-once"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "key-once")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a single key: %d %s", resp.StatusCode, b)
		}
	}
}
