package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A session whose agent searched a knowledge base with the rag tool verifies with
// the configuration's "knowledge" section: the tool's spec is rebuilt as the node
// offered it, and its result comes from the log, although the knowledge base has
// changed since.
func TestVerifyASessionWithTheRAGTool(t *testing.T) {
	dir := t.TempDir()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "rag", Arguments: `{"op":"search","args":{"query":"port"}}`}}},
		{Content: "Port 8080 [faq > # FAQ]."},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: dir, Model: model, Knowledge: &knowledge.Config{},
		KnowledgeTool: &node.KnowledgeToolConfig{Base: "docs"}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Knowledge().Base(ctx, "docs")
	if err == nil {
		_, err = b.AddText(ctx, "faq", "# FAQ\n\nThe node serves HTTP on port 8080.", "k1")
	}
	if err != nil {
		stop()
		t.Fatal(err)
	}
	events := nodetest.Run(t, n, "with-rag", "which port?")
	_, err = b.AddText(ctx, "faq", "# FAQ\n\nThe node now serves HTTP on port 9090.", "k2")
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", last.Type)
	}
	cfg := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(cfg, []byte(`{"knowledge": {"tool": true, "default": "docs"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "verify", "with-rag", "--data", dir, "--config", cfg); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: %d\n%s%s", code, out, errs)
	}
	// Without the configuration the agent has no rag tool, gathers no evidence and
	// diverges at the session's first gathering: verify says which tool it lacks
	// and where to get it, rather than leave a false divergence unexplained.
	code, out, errs := replay(t, "verify", "with-rag", "--data", dir)
	if code != 1 || !strings.Contains(out, "diverges") ||
		!strings.Contains(errs, `hint: the session called tool "rag", which the agent verified here does not have: verify it with the configuration it ran with (--config, --agents)`) {
		t.Fatalf("verify without --config: %d\n%s%s", code, out, errs)
	}
}

// missingTools names the tools that answered a session's calls and that the agent
// lacks, not one the model made up, which the session answered as unknown.
func TestMissingToolsNamesPerformedToolsOnly(t *testing.T) {
	event := func(actor string, p messages.Payload) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.Actor = actor
		return e
	}
	events := []messages.Envelope{
		event("session", &messages.TaskSubmitted{Input: "which port?"}),
		event("tool/rag", &messages.ToolCallCompleted{Key: "s/2", CallID: "gather/evidence", Tool: "rag", Result: "{}"}),
		event("tool/calculator", &messages.ToolCallCompleted{Key: "s/4", CallID: "c1", Tool: "calculator", Result: "4"}),
		event("session", &messages.ToolCallCompleted{Key: "s/5", CallID: "c2", Tool: "search_web", Error: `unknown tool "search_web"`}),
	}
	agents := actors.Agents{Default: actors.Agent{Tools: []messages.ToolSpec{{Name: "calculator"}}}}
	if got := missingTools(events, agents); !slices.Equal(got, []string{"rag"}) {
		t.Errorf("missing tools %q, want rag only", got)
	}
}
