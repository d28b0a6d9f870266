package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/session.jsonl from a freshly recorded session")

func readAll(t *testing.T, dir string) map[string][]messages.Envelope {
	t.Helper()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	infos, err := lg.Sessions(ctx, eventlog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]messages.Envelope{}
	for _, s := range infos {
		evs, err := lg.Read(ctx, s.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		out[s.ID] = evs
	}
	return out
}

func TestVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	id := recordSession(t, dir, "What is 12 * (7 + 5)?")
	code, out, errs := replay(t, "verify", id, "--data", dir)
	if code != 0 || !strings.Contains(out, "deterministic") {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	// A session recorded by different agent code (here: another prompt, as the
	// prompt hash says) is reported at the step where it parts.
	export := filepath.Join(t.TempDir(), "s.jsonl")
	if code, _, errs := replay(t, "export", id, "--data", dir, "--out", export); code != 0 {
		t.Fatal(errs)
	}
	b, _ := os.ReadFile(export)
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.Contains(l, `"type":"model.requested"`) && strings.Contains(l, `"step":2`) {
			var e messages.Envelope
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatal(err)
			}
			e.Payload = bytes.Replace(e.Payload, []byte(`"prompt_hash":"`), []byte(`"prompt_hash":"0`), 1)
			nb, _ := messages.Marshal(e)
			lines[i] = string(nb)
		}
	}
	other := t.TempDir()
	if err := os.WriteFile(export, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := replay(t, "import", export, "--data", other); code != 0 {
		t.Fatal(errs)
	}
	code, out, _ = replay(t, "verify", id, "--data", other, "--json")
	var res verifyResult
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil || res.Deterministic || res.Divergence == nil || res.Divergence.Seq != 6 || res.Divergence.Step != 1 {
		t.Fatalf("verify of a changed session: %d %s", code, out)
	}
}

func TestForkCopiesThePrefixAndContinuesLive(t *testing.T) {
	dir := t.TempDir()
	parentID := recordSession(t, dir, "What is 12 * (7 + 5)?")
	before := readAll(t, dir)[parentID]

	// Fork right after the model asked for the calculator: the fork runs the tool itself.
	code, out, errs := replay(t, "fork", parentID, "--at", "3", "--session", "child", "--data", dir)
	if code != 0 || !strings.Contains(out, "answer: 144") {
		t.Fatalf("fork: %d\n%s\n%s", code, out, errs)
	}
	all := readAll(t, dir)
	child := all["child"]
	for i := 0; i < 3; i++ {
		p, c := before[i], child[i]
		if p.Seq != c.Seq || p.Type != c.Type || p.TS != c.TS || p.Actor != c.Actor {
			t.Fatalf("fork event %d differs from the parent's: %+v vs %+v", i+1, c, p)
		}
		want := strings.ReplaceAll(string(p.Payload), parentID+"/", "child/")
		if string(c.Payload) != want {
			t.Fatalf("fork payload %d: %s, want %s", i+1, c.Payload, want)
		}
	}
	if child[3].Type != messages.TypeSessionForked {
		t.Fatalf("seq 4 of the fork is %s", child[3].Type)
	}
	if last := child[len(child)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the fork ended with %s", last.Type)
	}
	for i, e := range child {
		if e.Seq != uint64(i+1) {
			t.Fatalf("fork seq %d at %d", e.Seq, i)
		}
	}
	if after := all[parentID]; len(after) != len(before) {
		t.Fatalf("the parent changed: %d events, had %d", len(after), len(before))
	}
	for i := range before {
		if !bytes.Equal(mustMarshal(t, before[i]), mustMarshal(t, all[parentID][i])) {
			t.Fatalf("parent event %d changed", i+1)
		}
	}

	// A fork of a finished session with a new input continues the conversation.
	code, out, errs = replay(t, "fork", parentID, "--at", "8", "--input", "echo again", "--session", "child2", "--data", dir)
	if code != 0 || !strings.Contains(out, "answer: again") {
		t.Fatalf("fork with input: %d\n%s\n%s", code, out, errs)
	}
	if code, _, _ := replay(t, "verify", "child", "--data", dir); code != 0 {
		t.Fatal("a fork must verify as deterministic")
	}
}

func mustMarshal(t *testing.T, e messages.Envelope) []byte {
	t.Helper()
	b, err := messages.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The golden export guards the format: it imports, verifies, and exports back to the
// same bytes. Regenerate (only for an intended format change) with -update.
func TestGoldenExport(t *testing.T) {
	golden := filepath.Join("testdata", "session.jsonl")
	if *updateGolden {
		dir := t.TempDir()
		id := recordSession(t, dir, "What is 12 * (7 + 5)?")
		if code, _, errs := replay(t, "export", id, "--data", dir, "--out", golden); code != 0 {
			t.Fatal(errs)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errs := replay(t, "import", golden, "--data", dir)
	if code != 0 {
		t.Fatalf("import: %s %s", out, errs)
	}
	var h exportHeader
	_ = json.Unmarshal(bytes.SplitN(want, []byte("\n"), 2)[0], &h)
	code, got, errs := replay(t, "export", h.SessionID, "--data", dir)
	if code != 0 || got != string(want) {
		t.Fatalf("export after import differs from the golden file (%d %s):\n%s", code, errs, got)
	}
	if code, out, _ := replay(t, "verify", h.SessionID, "--data", dir); code != 0 {
		t.Fatalf("the golden session must verify: %s", out)
	}
}

func TestImportAndForkRejectBadInputAndWriteNothing(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "session.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(golden)), "\n")
	bad := map[string]string{
		"empty":         "",
		"not a header":  strings.Join(lines[1:], "\n"),
		"truncated":     strings.Join(lines[:len(lines)-1], "\n"),
		"cut mid-line":  string(golden[:len(golden)-40]),
		"corrupt JSON":  strings.Replace(string(golden), `"type":"tool.completed"`, `"type":tool.completed"`, 1),
		"gap":           strings.Join(append(append([]string{}, lines[:3]...), lines[4:]...), "\n"),
		"future schema": strings.Replace(string(golden), `"type":"tool.completed","v":1`, `"type":"tool.completed","v":9`, 1),
		"future format": strings.Replace(string(golden), `"version":1`, `"version":7`, 1),
		"unknown type":  strings.Replace(string(golden), `"type":"tool.completed"`, `"type":"tool.teleported"`, 1),
		"other session": strings.Replace(string(golden), lines[2][:60], strings.Replace(lines[2][:60], `"session_id":"`, `"session_id":"x`, 1), 1),
	}
	for name, content := range bad {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(t.TempDir(), "bad.jsonl")
			if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, errs := replay(t, "import", file, "--data", dir)
			if code != 1 || !strings.Contains(errs, "bad session export") {
				t.Fatalf("import: %d %s", code, errs)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("a rejected import wrote %d files", len(entries))
			}
		})
	}
	dir := t.TempDir()
	file := filepath.Join("testdata", "session.jsonl")
	if code, _, _ := replay(t, "import", file, "--data", dir); code != 0 {
		t.Fatal("import")
	}
	if code, _, errs := replay(t, "import", file, "--data", dir); code != 1 || !strings.Contains(errs, "already exists") {
		t.Fatalf("second import: %d %s", code, errs)
	}
	var h exportHeader
	_ = json.Unmarshal([]byte(lines[0]), &h)
	before := readAll(t, dir)
	for _, args := range [][]string{
		{"fork", h.SessionID, "--at", "99", "--data", dir},
		{"fork", "missing", "--at", "1", "--data", dir},
		{"fork", h.SessionID, "--at", "2", "--session", "../bad", "--data", dir},
		{"fork", h.SessionID, "--at", "2", "--session", h.SessionID, "--data", dir},
		{"verify", "missing", "--data", dir},
		{"export", "missing", "--data", dir},
	} {
		if code, _, errs := replay(t, args...); code == 0 || errs == "" {
			t.Errorf("%v: %d %s", args, code, errs)
		}
	}
	if code, _, _ := replay(t, "fork", h.SessionID, "--data", dir); code != 2 {
		t.Error("fork without --at must be a usage error")
	}
	if after := readAll(t, dir); len(after) != len(before) {
		t.Fatalf("bad commands wrote sessions: %d, had %d", len(after), len(before))
	}
}
