package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// An agent whose context extracts facts writes them to its core block through the
// node's memory tool: the next task's core memory has them.
func TestCompressExtractWritesTheAgentsCoreBlock(t *testing.T) {
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "- The user drinks tea."}, {Content: "- The user drinks tea."}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: model, Memory: &memory.Config{}, MemoryTool: &memory.ToolConfig{Namespace: "agent:a"},
		Context: actors.ContextOptions{Compression: actors.Compression{Strategy: pctx.CompressExtract, Window: 2, Step: 2, MemoryBlock: "facts"}}})
	var events []messages.Envelope
	for i := range 4 {
		events = nodetest.Run(t, n, "s1", fmt.Sprintf("I drink tea, part %d.", i))
	}
	ns, err := n.Memories().Namespace(context.Background(), "agent:a")
	if err != nil {
		t.Fatal(err)
	}
	if got := memory.RenderBlocks(ns.Blocks()); !strings.Contains(got, "The user drinks tea.") {
		t.Fatalf("core blocks %q, want the extracted fact", got)
	}
	stores := 0
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested && strings.Contains(string(e.Payload), actors.PurposeStoreFacts) {
			stores++
		}
	}
	if stores != 1 {
		t.Fatalf("%d store_facts calls, want 1 (the fact is extracted again, not stored again)", stores)
	}
	last := nodetest.Run(t, n, "s1", "What do I drink?")
	if got := last[len(last)-1]; got.Type != messages.TypeTaskCompleted {
		t.Fatalf("the last task ended with %s", got.Type)
	}
	for _, e := range last {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		if p, _ := e.Decode(); strings.Contains(p.(*messages.TaskSubmitted).Memory, "The user drinks tea.") {
			return
		}
	}
	t.Fatal("the next task's core memory does not have the fact")
}
