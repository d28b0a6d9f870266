package node_test

import (
	"context"
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

// nothingToRemember is a memory model that finds no fact in any turn, and counts
// the extractions it was asked for of turns that say "first", and of others.
type nothingToRemember struct{ first, others atomic.Int64 }

func (m *nothingToRemember) Name() string { return "nothing" }

func (m *nothingToRemember) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	said := false
	for _, msg := range req.Messages {
		said = said || strings.Contains(msg.Content, "first")
	}
	if said {
		m.first.Add(1)
	} else {
		m.others.Add(1)
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: `{"facts": []}`}}, nil
}

// A turn whose write after task found nothing to remember wrote nothing to its
// namespace, so each recovery (a partition's assignment) took it for one not
// remembered yet and extracted its facts again: a model call per turn of the
// hour, at every rebalance. A turn this process remembered, whatever it wrote,
// is not performed again by its recoveries.
func TestWriteAfterTaskRecoveryDoesNotRedoATurnThatWroteNothing(t *testing.T) {
	mm := &nothingToRemember{}
	model, err := llm.NewScripted(llm.Script{Steps: []llm.ScriptStep{{Content: "Noted."}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: model, Memory: &memory.Config{Model: mm},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:a"}, MemoryWriteAfterTask: true})
	nodetest.Run(t, n, "s-nothing", "Hello, this is my first message.")
	// The turns are remembered in order: once the next one's is asked for, the
	// first one's is done.
	nodetest.Run(t, n, "s-next", "Hello again.")
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for mm.others.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the next turn was never remembered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := mm.first.Load()
	if before == 0 {
		t.Fatal("the first turn was not remembered before the next")
	}
	n.RecoverWriteAfterTask(context.Background())
	if after := mm.first.Load(); after != before {
		t.Errorf("the recovery asked the memory model %d more times for a turn remembered already", after-before)
	}
}
