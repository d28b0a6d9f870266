package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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

// runAgent runs a task of agent on session and returns the session's events.
func runAgent(t *testing.T, n *node.Node, session, agent, input string) []messages.Envelope {
	t.Helper()
	live, stop := n.Watch(session)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: input, SessionID: session, Agent: agent}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-live:
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				events, err := n.Log().Read(context.Background(), session, 1)
				if err != nil {
					t.Fatal(err)
				}
				return events
			}
		case <-timeout:
			t.Fatalf("session %s: the task did not finish in 10 s", session)
		}
	}
}

// A named agent's summary model answers its compression's calls, through the
// node's gateway; its loop's calls go to its own model.
func TestCompressSummaryModelAnswersTheSummaries(t *testing.T) {
	model, err := llm.NewScripted(llm.Script{Name: "main", Steps: []llm.ScriptStep{{Content: "noted"}, {Content: "noted"}}})
	if err != nil {
		t.Fatal(err)
	}
	summariser, err := llm.NewScripted(llm.Script{Name: "summariser", Steps: []llm.ScriptStep{{Content: "SUMMARY"}, {Content: "SUMMARY"}}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: model, Agents: []node.NamedAgent{{Name: "chat", Tools: []string{}, SummaryModel: summariser,
		Context: actors.ContextOptions{Compression: actors.Compression{Strategy: pctx.CompressSummary, Window: 2, Step: 2}}}}})
	var events []messages.Envelope
	for i := range 4 {
		events = runAgent(t, n, "s1", "chat", fmt.Sprintf("fact %d", i))
	}
	summaries := 0
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ModelRequested:
			if want := map[bool]string{true: "summariser", false: "main"}[p.Purpose == pctx.PurposeSummarise]; p.Model != want {
				t.Fatalf("a %q call went to %s, want %s", p.Purpose, p.Model, want)
			}
		case *messages.ModelResponded:
			if p.Message.Content == "SUMMARY" {
				summaries++
			}
		}
	}
	if summaries == 0 {
		t.Fatal("no summary was answered by the summary model")
	}
	if got := events[len(events)-1]; got.Type != messages.TypeTaskCompleted {
		t.Fatalf("the last task ended with %s", got.Type)
	}
}
