package node_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/node"
)

// A Python client of a session's stream that reads it with httpx-sse (the SSE
// reader of the A2A and MCP Python SDKs) gets the session's events and nothing
// else while the stream idles: the keep-alive comment went out followed by a blank
// line, which httpx-sse, keeping the last event's id, turned into an event with no
// data, one per heartbeat (a client decoding each event's data as JSON failed at
// the first).
func TestStreamKeepAliveGivesHTTPXSSENoEmptyEvents(t *testing.T) {
	py := a2aPython03(t)                                                                                 // its environment has httpx-sse
	n, base, _ := serveHTTP(t, node.Config{HTTP: node.HTTPConfig{WriteTimeout: 200 * time.Millisecond}}) // a heartbeat every 100 ms
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const session = "sse-httpx"
	if _, err := n.Submit(ctx, node.Task{Input: "hello", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	logged := waitEnded(t, n, session)

	out, err := exec.CommandContext(ctx, py, filepath.Join("testdata", "sse-httpx.py"),
		base+"/v1/sessions/"+session+"/stream?deltas=false", "1.5").Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var events []struct{ Event, Data, ID string }
	if err := json.Unmarshal(out, &events); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	var empty, got int
	for _, e := range events {
		if strings.TrimSpace(e.Data) == "" {
			empty++
			continue
		}
		got++
	}
	if empty > 0 || got != len(logged) {
		t.Fatalf("httpx-sse read %d events with data and %d without over 1.5 s of an idle stream, want the %d logged and none without", got, empty, len(logged))
	}
}
