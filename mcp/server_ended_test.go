package mcp_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/troupe-run/troupe/mcp"
)

// A session its client deleted (an HTTP DELETE with its Mcp-Session-Id) answers
// 404 to a request in it, as the MCP spec says of a terminated session, on the
// node that served it and after a restart, where the node resumed it: the next
// request brought it back. A session not deleted is resumed after the restart as
// before, and one deleted after the restart, on a node that never served it, is
// ended too.
func TestServerHTTPDeletedSessionAnswers404(t *testing.T) {
	r := newRestartable(t, mcp.ServerOptions{}, newHoldModel(true))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deleted, kept, later := r.connect(ctx, nil).ID(), r.connect(ctx, nil).ID(), r.connect(ctx, nil).ID()
	do := func(method, id string) int {
		t.Helper()
		var resp *http.Response
		if method == http.MethodPost {
			resp = post(ctx, t, r.hs.URL, id, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
		} else {
			req, err := http.NewRequestWithContext(ctx, method, r.hs.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Mcp-Session-Id", id)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
			if resp, err = freshConns.Do(req); err != nil {
				t.Fatal(err)
			}
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do(http.MethodDelete, deleted); code/100 != 2 {
		t.Fatalf("DELETE answered %d", code)
	}
	if code := do(http.MethodPost, deleted); code != http.StatusNotFound {
		t.Errorf("a ping in the deleted session answered %d, want 404", code)
	}
	if code := do(http.MethodPost, kept); code != http.StatusOK {
		t.Errorf("a ping in the session kept answered %d, want 200", code)
	}

	r.restart(newHoldModel(true))
	if code := do(http.MethodPost, deleted); code != http.StatusNotFound {
		t.Errorf("after a restart, a ping in the deleted session answered %d, want 404", code)
	}
	if code := do(http.MethodDelete, deleted); code != http.StatusNotFound {
		t.Errorf("after a restart, a DELETE of the deleted session answered %d, want 404", code)
	}
	if code := do(http.MethodPost, kept); code != http.StatusOK {
		t.Errorf("after a restart, a ping in the session kept answered %d, want 200 (resumed)", code)
	}
	if code := do(http.MethodDelete, later); code/100 != 2 {
		t.Errorf("after a restart, a DELETE of a session not resumed answered %d", code)
	}
	if code := do(http.MethodPost, later); code != http.StatusNotFound {
		t.Errorf("a ping in the session deleted after the restart answered %d, want 404", code)
	}
}
