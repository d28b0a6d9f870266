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

// memoryNode starts a node on the log in dir with model, a memory and the memory
// tool in namespace agent:default.
func memoryNode(t *testing.T, dir string, model llm.Model) (*node.Node, func()) {
	t.Helper()
	return nodetest.StartWithStop(t, node.Config{DataDir: dir, Model: model, Memory: &memory.Config{},
		MemoryTool: &memory.ToolConfig{Namespace: "agent:default"}})
}

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
	n, stop := memoryNode(t, dir, model)
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

// memoryAdds counts the memory.added events of the log in dir, in every stream.
func memoryAdds(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, evs := range readAll(t, dir) {
		for _, e := range evs {
			if e.Type == messages.TypeMemoryAdded {
				n++
			}
		}
	}
	return n
}

// runFork runs replay fork of agent's first task into session, on the log in dir
// with the config cfg, the model's script in the file script and args after, and
// fails the test unless it exits 0 and prints want.
func runFork(t *testing.T, dir, agent, session, cfg, script, want string, args ...string) {
	t.Helper()
	code, out, errs := replay(t, append([]string{"fork", agent, "--at", "1", "--session", session, "--data", dir,
		"--config", cfg, "--model", "scripted:" + script}, args...)...)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("%s: %d\n%s\n%s", strings.Join(append([]string{"fork"}, args...), " "), code, out, errs)
	}
}

// forkRefused reports whether a tool call of session, in the log in dir, was
// answered with an error that names replay fork (a change a fork refused).
func forkRefused(t *testing.T, dir, session string) bool {
	t.Helper()
	for _, e := range readAll(t, dir)[session] {
		if p, _ := e.Decode(); p != nil {
			if c, ok := p.(*messages.ToolCallCompleted); ok && strings.Contains(c.Error, "replay fork") {
				return true
			}
		}
	}
	return false
}

// A fork reads the memory of --config but does not change it: the served node's
// memory is the log's, and a fork made to look into a session must not write it.
// Its memory tool offers the same actions (the same prompts), a write answering an
// error that says why; --memory-writes lets it write.
func TestForkDoesNotWriteTheMemory(t *testing.T) {
	dir, files := t.TempDir(), t.TempDir()
	script := `{"name": "scripted", "steps": [
  {"tool_calls": [{"id": "c1", "name": "memory", "arguments": "{\"op\": \"add\", \"args\": {\"content\": \"The user likes tea.\"}}"}]},
  {"content": "noted"}]}`
	scriptPath, cfgPath := filepath.Join(files, "script.json"), filepath.Join(files, "troupe.json")
	if err := os.WriteFile(scriptPath, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(`{"memory": {"tool": true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	model, err := llm.LoadScript(scriptPath)
	if err != nil {
		t.Fatal(err)
	}
	n, stop := memoryNode(t, dir, model)
	nodetest.Run(t, n, "remembers", "I like tea.")
	stop()
	if got := memoryAdds(t, dir); got != 1 {
		t.Fatalf("the session added %d memories, want 1", got)
	}

	other := filepath.Join(files, "other.json") // another fact: the same one would be found, not added
	if err := os.WriteFile(other, []byte(strings.Replace(script, "tea", "coffee", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	runFork(t, dir, "remembers", "fork-read", cfgPath, other, "noted")
	if got := memoryAdds(t, dir); got != 1 {
		t.Fatalf("after the fork the log holds %d memory.added events, want the session's 1", got)
	}
	if !forkRefused(t, dir, "fork-read") {
		t.Fatal("the fork's memory write was not answered with why it was refused")
	}

	runFork(t, dir, "remembers", "fork-write", cfgPath, other, "noted", "--memory-writes")
	if got := memoryAdds(t, dir); got != 2 {
		t.Fatalf("after a fork --memory-writes the log holds %d memory.added events, want 2", got)
	}
}
