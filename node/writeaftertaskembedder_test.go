package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// downEmbedder fails its first calls as an embedder that is down fails them
// (llm.ErrTransient), then embeds as the offline embedder does.
type downEmbedder struct{ failures atomic.Int64 }

func (e *downEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.failures.Add(-1) >= 0 {
		return nil, fmt.Errorf("embedder: HTTP 503: %w", llm.ErrTransient)
	}
	return llm.HashingEmbedder{}.Embed(ctx, texts)
}

// A task that completes while the embedder is down (a restart of the embedding
// server, a few seconds) is remembered once it is back: the write after the task
// is tried again while its failure is transient. Before, the turn was never
// remembered: one warning in the log, and the memory lost.
func TestWriteAfterTaskRidesOutAnEmbedderOutage(t *testing.T) {
	model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
	if err != nil {
		t.Fatal(err)
	}
	emb := &downEmbedder{}
	emb.failures.Store(2)
	n := nodetest.Start(t, node.Config{Model: model, Memory: &memory.Config{Embedder: emb},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: true})
	events := nodetest.Run(t, n, "s-down", "I live in Oslo and I like tea.")
	if done := events[len(events)-1]; done.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", done.Type)
	}
	ns, err := n.Memories().Namespace(context.Background(), "agent:a")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := ns.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, m := range ns.Snapshot() {
			text.WriteString(m.Content + "\n")
		}
		if strings.Contains(text.String(), "Oslo") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the turn was not remembered in 20 s after the embedder came back (it failed %d more times); remembered: %q", -emb.failures.Load(), text.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
