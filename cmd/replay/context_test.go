package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools/notes"
)

// TestShowPrintsEachModelCallsContext records a session under a context window of
// its own: show prints the context of each model call under it, --json carries
// it, and verify needs the same window (the config file's context section) to
// find the session deterministic.
func TestShowPrintsEachModelCallsContext(t *testing.T) {
	dir := t.TempDir()
	opts := actors.ContextOptions{Window: 4000, ReservedOutput: 500}
	n, err := node.New(context.Background(), node.Config{DataDir: dir, Context: opts})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("ctx-%d", time.Now().UnixNano())
	nodetest.Run(t, n, id, "What is 12 * (7 + 5)?")
	stop()

	code, out, errs := replay(t, "show", id, "--data", dir)
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	if strings.Count(out, "context: used ") != 2 {
		t.Errorf("want the context of both model calls:\n%s", out)
	}
	for _, want := range []string{"window 4000, reserved 500, system ", "+ system ", "+ task ", "+ turn/1 ", "+ turn/2 "} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = replay(t, "show", id, "--data", dir, "--json")
	if code != 0 {
		t.Fatalf("show --json: %d %s", code, errs)
	}
	var tl Timeline
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		t.Fatal(err)
	}
	var reports []*messages.ContextReport
	var walk func([]*Step)
	walk = func(steps []*Step) {
		for _, s := range steps {
			if s.Context != nil {
				reports = append(reports, s.Context)
			}
			walk(s.Children)
		}
	}
	walk(tl.Roots)
	if len(reports) != 2 || reports[0].Window != 4000 || reports[1].Budget != 4000-500-reports[1].System || reports[1].Used > reports[1].Budget {
		t.Fatalf("reports in --json: %+v", reports)
	}

	// The same window verifies; the node's default window builds another report.
	config := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(config, []byte(`{"context": {"window": 4000, "reserved_output": 500}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "verify", id, "--data", dir, "--config", config); code != 0 {
		t.Fatalf("verify with the recorded window: %d %s %s", code, out, errs)
	}
	if code, out, _ := replay(t, "verify", id, "--data", dir); code == 0 || !strings.Contains(out, `"window":4000`) {
		t.Fatalf("verify with another window must diverge on the report: %d %s", code, out)
	}
}

// TestRenderContextIsCompact prints a report: a head line, one line per item,
// truncated items marked, long lists cut with a count.
func TestRenderContextIsCompact(t *testing.T) {
	r := &messages.ContextReport{Window: 1000, Reserved: 100, System: 50, Budget: 850, Used: 840, Older: 7,
		Kept: []messages.ContextItem{
			{ID: "system", Kind: "system", Tokens: 50, Score: 1},
			{ID: "task", Kind: "task", Tokens: 300, Score: 1},
			{ID: "turn/40", Kind: "turn", Tokens: 490, Score: 0.75},
		},
		Truncated: []messages.ContextItem{{ID: "task", Kind: "task", Tokens: 300, From: 900, Score: 1}},
		Summarize: []string{"turn/8"},
	}
	for i := range 25 {
		r.Dropped = append(r.Dropped, messages.ContextItem{ID: fmt.Sprintf("turn/%d", i+8), Kind: "turn", Tokens: 100 + i, Score: 0.25, Reason: "budget"})
	}
	var b strings.Builder
	renderContext(&b, r, "  ")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{
		"  context: used 840 of 850 tokens (window 1000, reserved 100, system 50); 3 kept, 1 truncated, 25 dropped, 7 older turns not considered",
		"    + system                 system       50 tok  1.000",
		"    ~ task                   task        300 tok  1.000  cut from 900",
		"    + turn/40                turn        490 tok  0.750",
		"    - turn/8                 turn        100 tok  0.250  budget",
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d:\n got %q\nwant %q", i, lines[i], w)
		}
	}
	if len(lines) != 1+3+20+1+1 || lines[len(lines)-2] != "    … 5 more dropped" || lines[len(lines)-1] != "    to summarise: turn/8" {
		t.Errorf("%d lines, ending %q", len(lines), lines[len(lines)-2:])
	}
}

// A session recorded before model requests carried reports (the golden export)
// shows without context lines, and verifies.
func TestShowOfAnOldSessionHasNoContext(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := replay(t, "import", filepath.Join("testdata", "session.jsonl"), "--data", dir); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := replay(t, "show", "rec-1795995525076202836", "--data", dir)
	if code != 0 || strings.Contains(out, "context:") || !strings.Contains(out, "model.requested") {
		t.Fatalf("show: %d %s\n%s", code, errs, out)
	}
	if code, out, _ := replay(t, "verify", "rec-1795995525076202836", "--data", dir); code != 0 {
		t.Fatalf("verify: %s", out)
	}
}

// TestShowPrintsTheRetrievalsUnderTheirPurpose records a session whose agent
// gathers its notes before its first model call: show prints the retrieval under
// its purpose, the notes kept in the context, and verify, with the same settings,
// finds the session deterministic.
func TestShowPrintsTheRetrievalsUnderTheirPurpose(t *testing.T) {
	dir := t.TempDir()
	n, err := node.New(context.Background(), node.Config{DataDir: dir, Notes: &notes.Config{}, Context: actors.ContextOptions{Notes: 3}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("gather-%d", time.Now().UnixNano())
	nodetest.Run(t, n, id, "What is 12 * (7 + 5)?")
	stop()

	code, out, errs := replay(t, "show", id, "--data", dir)
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	if !strings.Contains(out, `notes gather/notes: notes({"op":"search","args":{"query":"What is 12 * (7 + 5)?","limit":3}})`) {
		t.Errorf("show lacks the retrieval under its purpose:\n%s", out)
	}
	config := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(config, []byte(`{"context": {"notes": 3}, "tools": {"notes": {}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := replay(t, "verify", id, "--data", dir, "--config", config); code != 0 {
		t.Fatalf("verify with the recorded settings: %d %s %s", code, out, errs)
	}
	// A fork after the retrieval reuses its recorded result: it retrieves nothing
	// again, and verifies.
	if code, out, errs := replay(t, "fork", id, "--at", "3", "--session", id+"-fork", "--data", dir, "--config", config, "--model", "offline"); code != 0 {
		t.Fatalf("fork: %d\n%s\n%s", code, out, errs)
	}
	child := readAll(t, dir)[id+"-fork"]
	retrievals := 0
	for _, e := range child {
		if p, _ := e.Decode(); p != nil {
			if r, ok := p.(*messages.ToolCallRequested); ok && r.Purpose == actors.PurposeNotes {
				retrievals++
			}
		}
	}
	if retrievals != 1 || child[len(child)-1].Type != messages.TypeTaskCompleted {
		t.Fatalf("the fork: %d retrievals, events %v", retrievals, child)
	}
	if code, out, errs := replay(t, "verify", id+"-fork", "--data", dir, "--config", config); code != 0 {
		t.Fatalf("verify the fork: %d %s %s", code, out, errs)
	}
}

// A context report's items stay on their lines, whatever their IDs, kinds and
// reasons hold (a report of an imported file is anyone's): before, a newline
// in one made lines that read as other items or steps, and a 1 MiB ID printed
// 1 MiB.
func TestRenderContextKeepsEachItemOnItsLine(t *testing.T) {
	hostile := "x\n    + forged                 turn        999 tok  1.000\n" + strings.Repeat("y", 1<<20)
	r := &messages.ContextReport{Window: 1000, Budget: 850, Used: 840,
		Kept:      []messages.ContextItem{{ID: hostile, Kind: hostile, Tokens: 50, Score: 1}},
		Dropped:   []messages.ContextItem{{ID: hostile, Kind: "turn", Tokens: 100, Score: 0.25, Reason: hostile}},
		Summarize: []string{hostile, "turn/8"},
		Notes:     []string{"the knowledge base failed:\n    + forged note"},
	}
	var b strings.Builder
	renderContext(&b, r, "  ")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 1+1+1+1+1 {
		t.Errorf("%d lines for a head, 2 items, the summarised and a note, want 5:\n%.2000s", len(lines), b.String())
	}
	for i, l := range lines {
		if len(l) > 1<<10 {
			t.Errorf("line %d is %d bytes long", i+1, len(l))
		}
	}
}
