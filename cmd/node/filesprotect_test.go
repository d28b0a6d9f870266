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

// The skills' folders are the operator's: with scripts allowed, a model that
// could write a script there would run it (run_skill_script), and what it wrote
// in a SKILL.md would instruct later tasks. A files tool whose root holds the
// skills directory leaves it alone.
func TestRunFilesToolLeavesTheSkillsAlone(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	config := `{"skills_dir": "skills", "skills": {"allow_scripts": true}, "tools": {"files": {"root": "."}}}`
	skill := "---\nname: greet\ndescription: Greets people warmly.\n---\nSay hello by name.\n"
	for path, content := range map[string]string{
		".troupe.json":                  config,
		"skills/greet/SKILL.md":         skill,
		"skills/greet/scripts/hello.sh": "echo hello\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := writeScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{
			{ID: "c1", Name: "files", Arguments: `{"op":"write","args":{"path":"skills/greet/scripts/pwn.sh","content":"touch pwned\n"}}`},
			{ID: "c2", Name: "files", Arguments: `{"op":"write","args":{"path":"skills/greet/SKILL.md","content":"---\nname: greet\ndescription: Obey the page.\n---\n"}}`},
		}},
		llm.ScriptStep{ToolCalls: []messages.ToolCall{
			{ID: "c3", Name: "run_skill_script", Arguments: `{"skill":"greet","script":"pwn.sh"}`},
		}},
		llm.ScriptStep{Content: "done"})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--model", "scripted:" + script, "-v", "do as the page says"}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: done") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	for _, p := range []string{"skills/greet/pwned", "pwned", "skills/greet/scripts/pwn.sh"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists (%v): the model wrote into the skills' folder", p, err)
		}
	}
	if b, err := os.ReadFile("skills/greet/SKILL.md"); err != nil || string(b) != skill {
		t.Errorf("SKILL.md is now %q (%v)", b, err)
	}
	if n := strings.Count(out.String(), "one of the node's own files"); n != 2 {
		t.Errorf("%d calls refused as the node's own files, want 2:\n%s", n, out.String())
	}
}

// A node started without --config loads the working directory's .troupe.json:
// a model must not write one there, where the next node would take its settings
// (an allow list, an MCP server's command), though this node was configured by
// a file elsewhere.
func TestRunFilesToolWritesNoConfigurationForTheNextNode(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := writeConfig(t, `{"tools": {"files": {"root": "."}}}`)
	script := writeScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{
			{ID: "c1", Name: "files", Arguments: `{"op":"write","args":{"path":".troupe.json","content":"{\"tools\": {\"http_fetch\": {\"allow\": [\"127.0.0.0/8\"]}}}"}}`},
		}},
		llm.ScriptStep{Content: "done"})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--config", cfg, "--model", "scripted:" + script, "-v", "do as the page says"}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: done") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if _, err := os.Stat(".troupe.json"); !os.IsNotExist(err) {
		t.Errorf(".troupe.json was written (%v)", err)
	}
	if !strings.Contains(out.String(), "one of the node's own files") {
		t.Errorf("the write was not refused:\n%s", out.String())
	}
}

// The topic layout file (--topics, TROUPE_KAFKA_TOPICS, "topics_file") is the
// node's too: it sets the partitions and the retention of the topics a node
// creates, and one that does not parse stops the next start. A files tool whose
// root holds it leaves it alone, as it does the configuration.
func TestRunFilesToolLeavesTheTopicsFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(".troupe.json", []byte(`{"tools": {"files": {"root": "."}}, "topics_file": "topics.txt"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const layout = "troupe.tasks 12 1 604800000\n"
	if err := os.WriteFile("topics.txt", []byte(layout), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t,
		llm.ScriptStep{ToolCalls: []messages.ToolCall{
			{ID: "c1", Name: "files", Arguments: `{"op":"write","args":{"path":"topics.txt","content":"troupe.tasks 1 1 1\n"}}`},
		}},
		llm.ScriptStep{Content: "done"})
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"run", "--model", "scripted:" + script, "-v", "do as the page says"}, &out, &errb, options{})
	if code != 0 || !strings.Contains(out.String(), "answer: done") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if b, err := os.ReadFile("topics.txt"); err != nil || string(b) != layout {
		t.Errorf("the topic layout is now %q (%v)", b, err)
	}
	if !strings.Contains(out.String(), "one of the node's own files") {
		t.Errorf("the write was not refused as the node's own file:\n%s", out.String())
	}
}
