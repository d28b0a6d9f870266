package node_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog/eventlogtest"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/redact"
)

// The error the node logs when an actor's supervisor gives up on it quotes the
// last failure redacted before it is cut: a secret across the cut would leave
// its head in the log, which the log's redaction no longer recognizes.
func TestTheGivenUpLogDoesNotQuoteTheHeadOfASecretAcrossTheCut(t *testing.T) {
	const secret = "Zq7-supersecret-value-abcdef012345"
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var logged lockedBuffer
	red := redact.New(secret)
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Content: "42"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		Log:      &eventlogtest.PanicsOnToolResult{Log: l, Session: "cut", Value: strings.Repeat("x", 285) + " " + secret},
		Model:    script,
		Redactor: red,
		Logger:   slog.New(redact.NewHandler(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelError}), red)),
	}
	n := nodetest.Start(t, cfg)
	runAgentTask(t, n, node.Task{SessionID: "cut", Input: "6*7?"})
	if out := logged.String(); !strings.Contains(out, "its supervisor stopped it") || strings.Contains(out, secret[:8]) {
		t.Errorf("the node's log:\n%s\nwants the give-up, and no head of the secret", out)
	}
}

// lockedBuffer is a log handler's output, written and read under a lock.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
