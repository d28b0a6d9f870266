package node_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/mcp"
	"github.com/troupe-run/troupe/node"
)

// rawPost posts body as JSON and returns the status and the answer's body.
func rawPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// Every JSON body a user sends reads past a byte order mark, as a task's does
// (messages.TrimByteOrderMark): a cancellation, an approval, an A2A or MCP
// JSON-RPC request sent from a file an editor saved with one was refused as
// "invalid character 'ï'", a character its sender never wrote. Each is answered
// as the same body without the mark.
func TestJSONBodiesAfterAByteOrderMark(t *testing.T) {
	n, base := a2aNode(t, node.Config{Model: a2aScript(t, llm.ScriptStep{Content: "x"}, llm.ScriptStep{Content: "y"})})
	ms := httptest.NewServer(mcp.NewServer(n, mcp.ServerOptions{}).Handler())
	t.Cleanup(ms.Close)
	if code, msg := postAs(t, base+"/v1/tasks", "application/json", `{"input":"echo hi","session_id":"bom-bodies"}`); code != http.StatusAccepted {
		t.Fatalf("the task: %d %s", code, msg)
	}
	waitDone(t, base, "bom-bodies")
	for _, c := range []struct{ name, url, body, want string }{
		{"a cancellation", base + "/v1/sessions/bom-bodies/cancel", `{"reason":"enough"}`, ""},
		{"an approval", base + "/v1/sessions/bom-bodies/approvals/call-1", `{"approve":true,"reason":"ok"}`, ""},
		{"an A2A message", base + "/a2a", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","role":"user","messageId":"m-bom","parts":[{"kind":"text","text":"hi"}]}}}`, `"result"`},
		{"an MCP request", ms.URL, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bom","version":"1"}}}`, `"result"`},
	} {
		code, answer := rawPost(t, c.url, "\ufeff"+c.body)
		if strings.Contains(answer, "ï") || strings.Contains(answer, "not JSON") || code == http.StatusBadRequest || !strings.Contains(answer, c.want) {
			t.Errorf("%s after a byte order mark: %d %.300s", c.name, code, answer)
		}
	}
}

// The same task sent with an Idempotency-Key, once with a byte order mark before
// its JSON and once without (sent again from another tool), is one task: the mark
// is no part of what the client sent (an editor wrote it), and the key names the
// task by the JSON it holds.
func TestIdempotentTaskWithAndWithoutAByteOrderMark(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	body := `{"input":"echo once"}`
	code, first := postKeyed(t, base, "bom-key-1", "\ufeff"+body)
	if code != http.StatusAccepted {
		t.Fatalf("with the mark: %d %v", code, first)
	}
	code, again := postKeyed(t, base, "bom-key-1", body)
	if code != http.StatusAccepted {
		t.Fatalf("without the mark: %d %v", code, again)
	}
	if first["session_id"] == "" || first["session_id"] != again["session_id"] {
		t.Fatalf("one task in one session, sent with and without a byte order mark: %v, then %v", first, again)
	}
	waitDone(t, base, first["session_id"])
	if c := countTasks(t, n, first["session_id"]); c != 1 {
		t.Fatalf("%d tasks recorded, want 1", c)
	}
}
