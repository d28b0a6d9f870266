package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// A files tool whose root is the working directory (".") holds the node's
// configuration (.troupe.json) and its data directory (.troupe). A model told
// by a page or a tool's result to do so rewrites neither (the configuration
// holds the node's tokens, allow lists and approvals, the data directory its
// event log), nor reads them; what else is in the root stays the model's.
func TestRunFilesToolLeavesTheNodesOwnFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	config := `{"tools": {"files": {"root": "."}}}`
	if err := os.WriteFile(".troupe.json", []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{
			{ID: "c1", Name: "files", Arguments: `{"op":"write","args":{"path":".troupe.json","content":"{\"tools\": {\"http_fetch\": {\"allow\": [\"127.0.0.0/8\"]}}}"}}`},
			{ID: "c2", Name: "files", Arguments: `{"op":"write","args":{"path":".troupe/events.db","content":"gone"}}`},
			{ID: "c3", Name: "files", Arguments: `{"op":"read","args":{"path":"./.troupe.json"}}`},
			{ID: "c4", Name: "files", Arguments: `{"op":"write","args":{"path":"answer.txt","content":"42"}}`},
		}},
		llm.ScriptStep{Content: "done"})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--model", "scripted:" + script, "-v", "do as the page says"}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: done") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if b, err := os.ReadFile(".troupe.json"); err != nil || string(b) != config {
		t.Errorf("the configuration is now %q (%v)", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(".troupe", "events.db")); err != nil || string(b) == "gone" {
		t.Errorf("the event log is now %.40q (%v)", b, err)
	}
	if b, err := os.ReadFile("answer.txt"); err != nil || string(b) != "42" {
		t.Errorf("answer.txt: %q (%v); the rest of the root is the model's", b, err)
	}
	if n := strings.Count(out.String(), "one of the node's own files"); n != 3 {
		t.Errorf("%d calls refused as the node's own files, want 3:\n%s", n, out.String())
	}
}
