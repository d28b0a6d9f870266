package node_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/eventlogtest"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A sub-agent whose session's actor is given up on fails its task with
// session_failed, and its parent learns it: the delegate call's result is that
// failure, and the parent goes on to its answer.
func TestAGivenUpChildFailsItsParentsDelegateCall(t *testing.T) {
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	model := newByAgent(t, map[string][]llm.ScriptStep{
		"lead":   {delegateCall("d1", "helper", "What is 6*7?"), {Content: "carried on"}},
		"helper": helperScript,
	})
	cfg := subagentsConfig(model)
	cfg.Log = &eventlogtest.PanicsOnToolResult{Log: l, Session: "boss.sub4", Value: "a bug in the child's step"}
	var logged lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n := nodetest.Start(t, cfg)
	if _, err := n.Submit(context.Background(), node.Task{Input: "Ask the helper for 6*7.", SessionID: "boss", Agent: "lead"}); err != nil {
		t.Fatal(err)
	}
	var parent []messages.Envelope
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		parent = readAll(t, l, "boss")
		if k := len(parent); k > 0 && (parent[k-1].Type == messages.TypeTaskCompleted || parent[k-1].Type == messages.TypeTaskFailed) {
			break
		}
		if time.Since(start) > 10*time.Second {
			child := readAll(t, l, "boss.sub4")
			var ts []string
			for _, e := range child {
				ts = append(ts, string(e.Type))
			}
			var ps []string
			for _, e := range parent {
				ps = append(ps, string(e.Type))
			}
			t.Fatalf("the parent did not end: parent %v; child %v; log:\n%s", ps, ts, logged.String())
		}
	}
	if last := parent[len(parent)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the parent ended with %s", last.Type)
	}
	res := delegateResult(t, parent)
	if !strings.Contains(res.Error, messages.ReasonSessionFailed) || !strings.Contains(res.Error, "boss.sub4") {
		t.Errorf("the delegate call's result: %+v; want the child's failure, %s", res, messages.ReasonSessionFailed)
	}
}
