package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/notes"
)

// A fork reads the agent's notes of --config but does not change them, as it
// does not change its memory: the notebook (notes/default) is the served node's,
// and every task of it reads what is there. A fork's remove deleted the node's
// note. Its notes tool offers the same operations (the same prompts), a change
// answering an error that says why; --memory-writes lets it change them.
func TestForkDoesNotWriteTheNotes(t *testing.T) {
	dir, files := t.TempDir(), t.TempDir()
	model, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "notes", Arguments: `{"op": "add", "args": {"body": "The user likes tea."}}`}}},
		{Content: "noted"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, stop := nodetest.StartWithStop(t, node.Config{DataDir: dir, Model: model, Notes: &notes.Config{}})
	nodetest.Run(t, n, "notes-taker", "I like tea.")
	stop()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	notebook := func() []messages.Type {
		var types []messages.Type
		for _, e := range readAll(t, dir)[notes.Stream("default")] {
			types = append(types, e.Type)
		}
		return types
	}
	if got := notebook(); len(got) != 1 || got[0] != messages.TypeNoteAdded {
		t.Fatalf("the session's notebook: %v, want one note.added", got)
	}

	script := `{"name": "scripted", "steps": [
  {"tool_calls": [{"id": "c1", "name": "notes", "arguments": "{\"op\": \"remove\", \"args\": {\"id\": \"n1\"}}"}]},
  {"content": "forgotten"}]}`
	scriptPath, cfgPath := filepath.Join(files, "script.json"), filepath.Join(files, "troupe.json")
	if err := os.WriteFile(scriptPath, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(`{"tools": {"notes": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	runFork(t, dir, "notes-taker", "fork-read", cfgPath, scriptPath, "forgotten")
	if got := notebook(); len(got) != 1 {
		t.Fatalf("after the fork the notebook holds %v, want the session's note.added alone", got)
	}
	if !forkRefused(t, dir, "fork-read") {
		t.Fatal("the fork's notes change was not answered with why it was refused")
	}

	runFork(t, dir, "notes-taker", "fork-write", cfgPath, scriptPath, "forgotten", "--memory-writes")
	if got := notebook(); len(got) != 2 || got[1] != messages.TypeNoteRemoved {
		t.Fatalf("after a fork --memory-writes the notebook holds %v, want the note removed", got)
	}
}
