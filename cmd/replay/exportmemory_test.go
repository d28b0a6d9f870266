package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/vectorstore"
)

// memoryHistory is the history of memory id of namespace agent:default in the
// log in dir, each change without its seq (its position in its stream).
func memoryHistory(t *testing.T, dir, id string) []memory.Change {
	t.Helper()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	store, err := vectorstore.Open(vectorstore.Config{NoSync: true}) // History reads no vector
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m, err := memory.Open(memory.Config{Log: lg, Vectors: store})
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.History(ctx, "agent:default", id)
	if err != nil {
		t.Fatalf("the history of %s in %s: %v", id, dir, err)
	}
	for i := range h {
		h[i].Seq = 0
		if h[i].Memory != nil {
			h[i].Memory.Version = 0
		}
	}
	return h
}

// The memory changes a session made travel with its export: imported into
// another data directory, each memory's history (and replay show of the
// namespace) explains them as the log they came from does, and another
// session's changes stay behind. Before, the export held the session's events
// only, and the history of its memories was not found there.
func TestExportCarriesTheSessionsMemoryChanges(t *testing.T) {
	dir, files := t.TempDir(), t.TempDir()
	script := func(name, fact string) string {
		path := filepath.Join(files, name+".json")
		s := `{"name": "scripted", "steps": [
  {"tool_calls": [{"id": "c1", "name": "memory", "arguments": "{\"op\": \"add\", \"args\": {\"content\": \"` + fact + `\", \"importance\": 0.8}}"}]},
  {"content": "noted"}]}`
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, s := range []struct{ session, fact string }{{"other", "The user owns a cat."}, {"remembers", "The user likes tea."}} {
		model, err := llm.LoadScript(script(s.session, s.fact))
		if err != nil {
			t.Fatal(err)
		}
		n, stop := memoryNode(t, dir, model)
		nodetest.Run(t, n, s.session, "remember this")
		stop()
	}
	ids := map[string]string{} // content -> memory ID
	for _, e := range readAll(t, dir)[memory.Stream("agent:default")] {
		if p, _ := e.Decode(); p != nil {
			if a, ok := p.(*messages.MemoryAdded); ok {
				ids[a.Memory.Content] = a.Memory.MemoryID
			}
		}
	}
	tea, cat := ids["The user likes tea."], ids["The user owns a cat."]
	if tea == "" || cat == "" {
		t.Fatalf("the sessions' memories: %v", ids)
	}
	want := memoryHistory(t, dir, tea)

	file := filepath.Join(files, "remembers.jsonl")
	if code, _, errs := replay(t, "export", "remembers", "--data", dir, "--out", file); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	to := t.TempDir()
	code, out, errs := replay(t, "import", file, "--data", to)
	if code != 0 || !strings.Contains(out, "restored 1 memory changes") {
		t.Fatalf("import: exit %d: %s%s", code, out, errs)
	}
	if got := memoryHistory(t, to, tea); !reflect.DeepEqual(got, want) {
		t.Errorf("the history of the session's memory after the import:\n%+v\nwant, as where it came from:\n%+v", got, want)
	}
	code, out, errs = replay(t, "show", memory.Stream("agent:default"), "--data", to)
	if code != 0 || !strings.Contains(out, "added "+tea+" (semantic): The user likes tea.: added by the agent (remembers/") || strings.Contains(out, cat) {
		t.Errorf("show the namespace after the import: exit %d: want the session's change alone:\n%s%s", code, out, errs)
	}

	// A memory change that the session did not make is refused, with nothing
	// written.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(files, "tampered.jsonl")
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") // the memory change is the last
	lines[len(lines)-1] = strings.Replace(lines[len(lines)-1], `"key":"remembers/`, `"key":"other/`, 1)
	if err := os.WriteFile(tampered, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	if code, _, errs := replay(t, "import", tampered, "--data", empty); code != 1 || !strings.Contains(errs, "that session remembers did not make") {
		t.Errorf("import of a memory change of another session: exit %d: %s", code, errs)
	}

	// Into a log whose namespace holds changes of its own, after them; and
	// a session imported again restores nothing twice.
	third := t.TempDir()
	model, err := llm.LoadScript(script("third", "The user runs."))
	if err != nil {
		t.Fatal(err)
	}
	n, stop := memoryNode(t, third, model)
	nodetest.Run(t, n, "third", "remember this")
	stop()
	if code, out, errs := replay(t, "import", file, "--data", third); code != 0 || !strings.Contains(out, "restored 1 memory changes") {
		t.Fatalf("import beside another session's memory: exit %d: %s%s", code, out, errs)
	}
	if got := memoryHistory(t, third, tea); !reflect.DeepEqual(got, want) {
		t.Errorf("the history of the session's memory after the import beside another's:\n%+v\nwant:\n%+v", got, want)
	}
	if got := len(readAll(t, third)[memory.Stream("agent:default")]); got != 2 {
		t.Errorf("the namespace holds %d events, want its own and the session's", got)
	}
}

// An import leaves a namespace of this log as it is when the session cleared a
// tier of it and it holds memories of its own here: the clear would remove
// them too. One that holds nothing here takes the changes.
func TestImportLeavesANamespaceTheSessionClearedWhereItHoldsOthers(t *testing.T) {
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	env := func(stream, id string, seq uint64, p messages.Payload) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = id, stream, seq, 1, "memory"
		return e
	}
	held, alone := memory.Stream("user:alice"), memory.Stream("user:bob")
	own := env(held, "mem-own", 1, &messages.MemoryAdded{Key: "http/k", Reason: "added over HTTP", Memory: messages.MemoryRecord{MemoryID: "m0", Tier: "working", Content: "x"}})
	if err := lg.Append(ctx, []messages.Envelope{own}); err != nil {
		t.Fatal(err)
	}
	changes := []messages.Envelope{
		env(held, "mem-a", 4, &messages.MemoryCleared{Key: "s/3", Reason: "clear_all by the agent", Tier: "working"}),
		env(alone, "mem-b", 7, &messages.MemoryCleared{Key: "s/5", Reason: "clear_all by the agent"}),
	}
	restored, skipped, err := writeMemory(ctx, lg, changes)
	if err != nil || restored != 1 || len(skipped) != 1 || skipped[0].namespace != "user:alice" {
		t.Fatalf("writeMemory: %d restored, %v skipped, %v; want 1, [user:alice]", restored, skipped, err)
	}
	if events, err := lg.Read(ctx, held, 1); err != nil || len(events) != 1 {
		t.Errorf("user:alice holds %d events (%v), want its own alone", len(events), err)
	}
	if events, err := lg.Read(ctx, alone, 1); err != nil || len(events) != 1 || events[0].Seq != 1 || events[0].ID != "mem-b" {
		t.Errorf("user:bob holds %+v (%v), want the clear at seq 1", events, err)
	}
}

// An import leaves a namespace of this log as it is when a change the session
// made would, appended after what the namespace holds, bring back a memory this
// log removed since or undo a later change to a memory or a block: the fold
// applies appended changes last. One whose changes touch nothing changed here
// since takes them. Before, the old update put a forgotten memory back, and
// replaced a newer value and a newer block.
func TestImportDoesNotUndoLaterMemoryChanges(t *testing.T) {
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	env := func(stream, id string, seq uint64, ts int64, p messages.Payload) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = id, stream, seq, ts, "memory"
		return e
	}
	rec := func(id, content string) messages.MemoryRecord {
		return messages.MemoryRecord{MemoryID: id, Tier: "semantic", Content: content}
	}
	forgot, newer, block, fine := memory.Stream("user:a"), memory.Stream("user:b"), memory.Stream("user:c"), memory.Stream("user:d")
	own := []messages.Envelope{
		env(forgot, "mem-a1", 1, 10, &messages.MemoryAdded{Key: "http/1", Memory: rec("m-a", "likes tea")}),
		env(forgot, "mem-a2", 2, 30, &messages.MemoryForgotten{Key: "http/2", MemoryIDs: []string{"m-a"}}),
		env(newer, "mem-b1", 1, 10, &messages.MemoryAdded{Key: "http/3", Memory: rec("m-b", "lives in Oslo")}),
		env(newer, "mem-b2", 2, 30, &messages.MemoryUpdated{Key: "http/4", Memory: rec("m-b", "lives in Bergen")}),
		env(block, "mem-c1", 1, 30, &messages.MemoryBlockSet{Key: "http/5", Label: "persona", Value: "terse"}),
		env(fine, "mem-d1", 1, 10, &messages.MemoryAdded{Key: "http/6", Memory: rec("m-d", "has a cat")}),
	}
	if err := lg.Append(ctx, own); err != nil {
		t.Fatal(err)
	}
	changes := []messages.Envelope{
		env(forgot, "mem-s1", 4, 20, &messages.MemoryUpdated{Key: "s/3", Memory: rec("m-a", "likes green tea")}),
		env(newer, "mem-s2", 5, 20, &messages.MemoryUpdated{Key: "s/3", Memory: rec("m-b", "lives in Trondheim")}),
		env(block, "mem-s3", 2, 20, &messages.MemoryBlockSet{Key: "s/5", Label: "persona", Value: "chatty"}),
		env(fine, "mem-s4", 3, 20, &messages.MemoryUpdated{Key: "s/7", Memory: rec("m-d", "has two cats")}),
	}
	restored, skipped, err := writeMemory(ctx, lg, changes)
	var names []string
	for _, s := range skipped {
		names = append(names, s.namespace)
	}
	if err != nil || restored != 1 || !reflect.DeepEqual(names, []string{"user:a", "user:b", "user:c"}) {
		t.Fatalf("writeMemory: %d restored, %v skipped, %v; want 1, [user:a user:b user:c]", restored, skipped, err)
	}
	for stream, want := range map[string]int{forgot: 2, newer: 2, block: 1, fine: 2} {
		if events, err := lg.Read(ctx, stream, 1); err != nil || len(events) != want {
			t.Errorf("%s holds %d events (%v), want %d", stream, len(events), err, want)
		}
	}
}

// An import the log refuses (an event ID of the session that another session
// of the log holds) writes none of the session's memory changes: they are
// written in the session's own append. Before, they were appended first, and
// stayed behind, changes of a session the log does not hold.
func TestImportTheLogRefusesRestoresNoMemory(t *testing.T) {
	ctx := context.Background()
	_, id, file, _ := exportedSession(t)
	open := func() (io.ReadCloser, error) { return os.Open(file) }
	plan, err := planImport(ctx, open, unfinishedRefuse, 0)
	if err != nil {
		t.Fatal(err)
	}
	events, _, err := readExport(mustOpen(t, file))
	if err != nil {
		t.Fatal(err)
	}
	change, err := messages.NewEnvelope(&messages.MemoryAdded{Key: id + "/4", Reason: "added by the agent", Memory: messages.MemoryRecord{MemoryID: "m1", Tier: "semantic", Content: "The user likes tea."}})
	if err != nil {
		t.Fatal(err)
	}
	ns := memory.Stream("agent:default")
	change.ID, change.SessionID, change.Seq, change.TS, change.Actor = "mem-1", ns, 1, events[3].TS, "memory"
	plan.memory = []messages.Envelope{change}

	for name, bound := range map[string]appendBound{"whole": {events: 1 << 20, bytes: 1 << 30}, "in batches": {events: 1, bytes: 1}} {
		lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer lg.Close()
		taken := events[len(events)-1]
		if name == "whole" {
			taken = events[1]
		}
		taken.SessionID, taken.Seq, taken.CausationID, taken.CorrelationID = "other", 1, "", ""
		if err := lg.Append(ctx, []messages.Envelope{taken}); err != nil {
			t.Fatal(err)
		}
		if err := plan.write(ctx, lg, open, bound); !errors.Is(err, eventlog.ErrSeqConflict) {
			t.Fatalf("%s: import of a session whose event ID the log holds: %v; want it refused", name, err)
		}
		if held, err := lg.Read(ctx, ns, 1); err != nil || len(held) != 0 {
			t.Errorf("%s: a refused import left %d memory changes in %s (%v)", name, len(held), ns, err)
		}
		// Into a log that takes it, the changes are restored with it.
		clean, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer clean.Close()
		if err := plan.write(ctx, clean, open, bound); err != nil || plan.memoryRestored != 1 {
			t.Fatalf("%s: import: %v, %d memory changes restored; want 1", name, err, plan.memoryRestored)
		}
		if held, err := clean.Read(ctx, ns, 1); err != nil || len(held) != 1 || held[0].ID != change.ID {
			t.Errorf("%s: the import restored %d memory changes to %s (%v), want its one", name, len(held), ns, err)
		}
	}
}

func mustOpen(t *testing.T, file string) io.Reader {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// An export of a later format version is refused for its version, also when
// that version adds a key to the header (as version 2 added configs and 3
// memory): the keys were checked first, and such a file was refused as one
// whose header holds an unknown key, which did not say that a later build
// wrote it.
func TestImportRefusesALaterVersionForItsVersion(t *testing.T) {
	for _, header := range []string{
		`{"format":"troupe.session","version":4,"session_id":"s1","events":1,"steps":3}`,
		`{"format":"troupe.session","version":4,"session_id":"s1","events":1}`,
	} {
		_, _, err := readExport(strings.NewReader(header + "\n"))
		if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), "export format version 4 is newer than this build reads (3)") {
			t.Errorf("header %s: %v; want it refused as of a later version", header, err)
		}
	}
	// A header of this version with an unknown key is refused for the key.
	_, _, err := readExport(strings.NewReader(`{"format":"troupe.session","version":3,"session_id":"s1","events":1,"steps":3}` + "\n"))
	if !errors.Is(err, ErrBadExport) || !strings.Contains(err.Error(), `unknown key "steps"`) {
		t.Errorf("a version 3 header with an unknown key: %v", err)
	}
}
