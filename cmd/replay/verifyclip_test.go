package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A divergence in a large event is printed clipped around its first difference,
// which stays in view; --full prints the events whole, and --json has them whole
// with the offset of the difference.
func TestVerifyClipsALargeDivergence(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	answer := strings.Repeat("lorem ipsum dolor sit amet ", 12_000) // 324 KB
	model, err := llm.NewScripted(llm.Script{Name: "big", Steps: []llm.ScriptStep{{Content: answer}}})
	if err != nil {
		t.Fatal(err)
	}
	if end := recordTasks(t, node.Config{DataDir: data, Model: model}, nil, node.Task{Input: "say a lot", SessionID: "big"})[0]; end.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", end.Type)
	}
	// The recorded answer is changed at about two thirds of its length: the agent
	// now decides the answer the model gave, which differs there.
	export := filepath.Join(dir, "big.jsonl")
	if code, _, errs := replay(t, "export", "big", "--data", data, "--out", export); code != 0 {
		t.Fatal(errs)
	}
	b, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	changed := false
	for i, l := range lines {
		if !strings.Contains(l, `"type":"task.completed"`) {
			continue
		}
		var e messages.Envelope
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		cut := bytes.Index(e.Payload, []byte("lorem")) + 2*len(answer)/3
		e.Payload = append(append(e.Payload[:cut:cut], "CHANGED "...), e.Payload[cut:]...)
		nb, err := messages.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		lines[i], changed = string(nb), true
	}
	if !changed {
		t.Fatal("no task.completed in the export")
	}
	if err := os.WriteFile(export, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if code, _, errs := replay(t, "import", export, "--data", other); code != 0 {
		t.Fatal(errs)
	}

	code, out, errs := replay(t, "verify", "big", "--data", other)
	if code != 1 || !strings.Contains(out, "diverges at seq") {
		t.Fatalf("verify: exit %d\n%.2000s%s", code, out, errs)
	}
	if len(out) > 4000 {
		t.Errorf("verify printed %d bytes for a divergence, want it clipped:\n%.2000s", len(out), out)
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 1000 {
			t.Errorf("a line of %d bytes: %.200s…", len(l), l)
		}
	}
	if !strings.Contains(out, "CHANGED") || !strings.Contains(out, `"output":"lorem ipsum`) || !strings.Contains(out, "--full") {
		t.Errorf("the clipped divergence shows neither the difference nor the events' start, or does not say how to see them whole:\n%s", out)
	}
	code, full, _ := replay(t, "verify", "big", "--data", other, "--full")
	if code != 1 || len(full) < 2*len(answer) || !strings.Contains(full, "CHANGED") {
		t.Errorf("verify --full: exit %d, %d bytes, want both events whole (over %d)", code, len(full), 2*len(answer))
	}
	code, js, _ := replay(t, "verify", "big", "--data", other, "--json")
	var res verifyResult
	if code != 1 || json.Unmarshal([]byte(js), &res) != nil || res.Divergence == nil || len(res.Divergence.Expected) < len(answer) ||
		!strings.HasPrefix(res.Divergence.Expected[res.Divergence.At:], "CHANGED") {
		t.Errorf("verify --json: exit %d, want the events whole with the offset of their difference", code)
	}
}
