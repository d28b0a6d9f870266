package main

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A stream of the log that is no session (here an MCP client's session, as
// list names it) is not verified: verify says so, instead of calling its events
// deterministic, re-decided, when no task ran there.
func TestVerifyOfAStreamThatIsNoSession(t *testing.T) {
	dir := t.TempDir()
	id := "mcp/session/ABC"
	e, err := messages.NewEnvelope(&messages.MCPLevelSet{Level: "info"})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = id+"/1", id, 1, 1, "mcp"
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	lg.Close()
	code, out, errs := replay(t, "verify", id, "--data", dir)
	if code != 0 || strings.Contains(out, "deterministic") || !strings.Contains(out, "no session") || !strings.Contains(out, "mcp-session") {
		t.Fatalf("verify of an MCP client's session stream: %d %q %q", code, out, errs)
	}
	code, out, _ = replay(t, "verify", id, "--data", dir, "--json")
	if code != 0 || !strings.Contains(out, `"no_session": "mcp-session"`) || !strings.Contains(out, `"deterministic": false`) {
		t.Fatalf("verify --json: %d %s", code, out)
	}
}
