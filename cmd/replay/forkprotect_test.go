package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// A fork runs its tools for real, as a node does: its files tool, whose root
// holds the data directory and the configuration, touches neither, as the
// node's does not.
func TestForkFilesToolLeavesTheNodesOwnFiles(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	config := `{"tools": {"files": {"root": ` + quote(dir) + `}}}`
	writeFiles(t, dir, map[string]string{"troupe.json": config})
	cfgPath := filepath.Join(dir, "troupe.json")
	box, err := tools.NewFiles(tools.FilesConfig{Root: dir, Protect: []string{data, cfgPath}})
	if err != nil {
		t.Fatal(err)
	}
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "hello"}}})
	if err != nil {
		t.Fatal(err)
	}
	recordRun(context.Background(), t, node.Config{DataDir: data, Model: model,
		Tools: []tools.Tool{tools.Calculator{}, tools.NewClock(nil), box}}, "parent", "say hello")

	writeFiles(t, dir, map[string]string{"script/rest.json": `{"name": "scripted", "steps": [
		{"tool_calls": [
			{"id": "c1", "name": "files", "arguments": "{\"op\":\"write\",\"args\":{\"path\":\"troupe.json\",\"content\":\"{}\"}}"},
			{"id": "c2", "name": "files", "arguments": "{\"op\":\"write\",\"args\":{\"path\":\"data/planted\",\"content\":\"x\"}}"},
			{"id": "c3", "name": "files", "arguments": "{\"op\":\"write\",\"args\":{\"path\":\"mine.txt\",\"content\":\"ok\"}}"}]},
		{"content": "done"}]}`})
	code, out, errs := replay(t, "fork", "parent", "--at", "1", "--session", "parent-fork", "--data", data,
		"--config", cfgPath, "--model", "scripted:"+filepath.Join(dir, "script", "rest.json"))
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("fork: exit %d\n%s%s", code, out, errs)
	}
	if b, err := os.ReadFile(cfgPath); err != nil || string(b) != config {
		t.Errorf("the configuration is now %q (%v)", b, err)
	}
	if _, err := os.Stat(filepath.Join(data, "planted")); !os.IsNotExist(err) {
		t.Errorf("a file was written in the data directory: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "mine.txt")); err != nil || string(b) != "ok" {
		t.Errorf("mine.txt: %q (%v)", b, err)
	}
	if n := strings.Count(out, "one of the node's own files"); n != 2 {
		t.Errorf("%d calls refused as the node's own files, want 2:\n%s", n, out)
	}
}
