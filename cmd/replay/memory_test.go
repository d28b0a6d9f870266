package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A session whose tasks had the agent's core blocks in their prompts verifies: the
// blocks are recorded with each task (TaskSubmitted.Memory), not read again from the
// namespace, which has changed since.
func TestVerifyASessionWithCoreMemory(t *testing.T) {
	dir := t.TempDir()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "You live in Oslo."}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{DataDir: dir, Model: model, Memory: &memory.Config{},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default"}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := n.Memories().Namespace(ctx, "agent:default")
	if err == nil {
		err = ns.SetBlock(ctx, "k1", memory.Block{Label: memory.BlockHuman, Value: "Lives in Oslo."}, "test")
	}
	if err != nil {
		stop()
		t.Fatal(err)
	}
	events := nodetest.Run(t, n, "with-memory", "where do I live?")
	// The block changes after the task: verify still sees the one the task saw.
	err = ns.SetBlock(ctx, "k2", memory.Block{Label: memory.BlockHuman, Value: "Moved to Bergen."}, "test")
	stop()
	if err != nil {
		t.Fatal(err)
	}
	p, err := events[0].Decode()
	if err != nil || !strings.Contains(p.(*messages.TaskSubmitted).Memory, "Lives in Oslo.") {
		t.Fatalf("the task must record the blocks: %+v %v", p, err)
	}

	cfg := filepath.Join(t.TempDir(), "troupe.json")
	if err := os.WriteFile(cfg, []byte(`{"memory": {"tool": true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "verify", "with-memory", "--data", dir, "--config", cfg); code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify --config: %d\n%s%s", code, out, errs)
	}
}
