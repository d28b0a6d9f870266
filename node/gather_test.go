package node_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
)

// An agent with a knowledge base and the rag tool gathers 5 chunks of it by
// default, one with the memory tool 5 memories of its namespace, and none of
// its notes; an agent without them gathers nothing; an agent's own setting wins,
// 0 turning a source off; asking for a source the agent lacks is an error.
func TestGatherDefaultsFollowTheAgentsSources(t *testing.T) {
	cfg := node.Config{
		KnowledgeTool: &node.KnowledgeToolConfig{},
		MemoryTool:    &memory.ToolConfig{Namespace: "agent:default"},
		Agents: []node.NamedAgent{
			{Name: "reader", Knowledge: "papers", MemoryNamespace: "agent:reader"},
			{Name: "plain", Tools: []string{"calculator"}},
			{Name: "quiet", Knowledge: "papers", Context: actors.ContextOptions{Evidence: 2, Recall: actors.GatherOff}},
		},
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	def := all.Default
	if def.Context.Evidence != 0 || def.Context.Recall != actors.DefaultRecall || def.Sources.MemoryTool != "memory" || def.Sources.KnowledgeTool != "" {
		t.Fatalf("the default agent (no knowledge base): %+v %+v", def.Context, def.Sources)
	}
	r := all.Named["reader"]
	if r.Context.Evidence != actors.DefaultEvidence || r.Context.Recall != actors.DefaultRecall || r.Context.Notes != 0 ||
		r.Sources.KnowledgeTool != "rag" || r.Sources.KnowledgeBase != "papers" || r.Sources.MemoryNamespace != "agent:reader" {
		t.Fatalf("reader: %+v %+v", r.Context, r.Sources)
	}
	if p := all.Named["plain"]; p.Context.Evidence != 0 || p.Context.Recall != 0 || p.Sources != (actors.ContextSources{}) {
		t.Fatalf("plain: %+v %+v", p.Context, p.Sources)
	}
	if q := all.Named["quiet"]; q.Context.Evidence != 2 || q.Context.Recall != 0 {
		t.Fatalf("quiet: %+v", q.Context)
	}

	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "lost", Tools: []string{"calculator"}, Context: actors.ContextOptions{Evidence: 3}})
	if _, err := cfg.AllAgents(); err == nil || !strings.Contains(err.Error(), `agent "lost": context evidence 3: the agent has no knowledge base`) {
		t.Fatalf("an agent asking for evidence it cannot have: %v", err)
	}
	if err := cfg.CheckGather("lost"); err == nil {
		t.Fatal("CheckGather passed an agent asking for evidence it cannot have")
	}
}
