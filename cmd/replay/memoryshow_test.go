package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// replay show of a memory namespace says, on each change, which memories it
// touched, why, and under which key (the session event, request or consolidation
// run that made it), as the memory's history does: before, every change but a
// memory.remembered printed an empty line, so the timeline of a namespace could
// not say why a memory was forgotten, merged or distilled.
func TestReplayShowExplainsEachMemoryChange(t *testing.T) {
	dir := t.TempDir()
	id := "memory/user:alice"
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(mid, tier, content string, sources ...string) messages.MemoryRecord {
		r := messages.MemoryRecord{MemoryID: mid, Tier: tier, Content: content}
		for _, s := range sources {
			r.Sources = append(r.Sources, messages.MemorySource{Kind: "memory", ID: s})
		}
		return r
	}
	events := []messages.Payload{
		&messages.MemoryAdded{Key: "s-mem/6", Reason: "added by the agent", Memory: rec("m1", "semantic", "Alice lives in Lisbon")},
		&messages.MemoryAdded{Key: memory.RequestKey("http/k1/user:alice", "d1"), Reason: "added over HTTP", Memory: rec("m2", "semantic", "Alice lives in Lisbon.")},
		&messages.MemoryUpdated{Key: "s-mem/8", Reason: "updated by the agent", Memory: rec("m3", "working", "Alice plans Kyoto in April")},
		&messages.MemoryForgotten{Key: "s-mem/16/forget-7b67", Reason: "importance 0.05 < 0.2 and age 340.4d > 1d", MemoryIDs: []string{"m4"}},
		&messages.MemoryMerged{Key: "s-mem/16/merge-62af", Reason: "cosine 1 ≥ 0.92 with m1", Merged: []string{"m2"}, Memory: rec("m1", "semantic", "Alice lives in Lisbon")},
		&messages.MemoryPromoted{Key: "s-mem/16/promote-07d5", Reason: "importance 0.9 > 0.7", From: "working", Memory: rec("m3", "episodic", "Alice plans Kyoto in April")},
		&messages.MemoryDistilled{Key: "cli/0543/distill-e127", Reason: "3 episodic memories alike; summarised by fake", Memory: rec("m9", "semantic", "Alice runs most mornings", "m5", "m6", "m7")},
		&messages.MemoryInvalidated{Key: "cli/0543/invalidate-aa", Reason: "lives_in: Porto now", MemoryID: "m1", By: "m8", AtUS: 1},
		&messages.MemoryCleared{Key: "s-mem/20", Reason: "clear_all by the agent", Tier: "working"},
		&messages.MemoryBlockSet{Key: "s-mem/21", Reason: "set by the agent", Label: "human", Value: "Alice, a nurse", Limit: 2000},
		&messages.MemoryBlockDeleted{Key: "s-mem/22", Reason: "deleted by the agent", Label: "human"},
	}
	for i, p := range events {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.Actor = id, uint64(i+1), "memory"
		e.ID, e.TS = id+"/"+string(rune('a'+i)), int64(1_000_000+i)
		if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	lg.Close()
	want := []string{
		"added m1 (semantic): Alice lives in Lisbon: added by the agent (s-mem/6)",
		"added m2 (semantic): Alice lives in Lisbon.: added over HTTP (http/k1/user:alice)",
		"updated m3 (working): Alice plans Kyoto in April: updated by the agent (s-mem/8)",
		"forgot m4: importance 0.05 < 0.2 and age 340.4d > 1d (s-mem/16/forget-7b67)",
		"merged m2 into m1: cosine 1 ≥ 0.92 with m1 (s-mem/16/merge-62af)",
		"promoted m3 from working to episodic: importance 0.9 > 0.7 (s-mem/16/promote-07d5)",
		"distilled m5, m6, m7 into m9 (semantic): Alice runs most mornings: 3 episodic memories alike; summarised by fake (cli/0543/distill-e127)",
		"invalidated m1 by m8: lives_in: Porto now (cli/0543/invalidate-aa)",
		"cleared the working tier: clear_all by the agent (s-mem/20)",
		"core block human set: Alice, a nurse: set by the agent (s-mem/21)",
		"core block human deleted: deleted by the agent (s-mem/22)",
	}
	for _, args := range [][]string{{"show", id, "--data", dir}, {"show", id, "--data", dir, "--json"}} {
		code, out, errs := replay(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		out = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(out) // --json escapes them
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: no line %q in:\n%s", args, w, out)
			}
		}
		if strings.Contains(out, "#request=") {
			t.Errorf("%v: a key with its request's digest:\n%s", args, out)
		}
	}
}

// What replay show prints of a memory change stays on its step's line, of a
// bounded length, and cannot act on the terminal, whatever the change's text
// holds: every field is clipped as a task's input is, where a memory's ID, its
// tier, what invalidated it, and a step's actor, were printed whole (a newline
// in one forged timeline lines, a 1 MiB one printed 1 MiB).
func TestReplayShowClipsHostileMemoryChanges(t *testing.T) {
	dir := t.TempDir()
	id := "memory/user:mallory"
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	hostile := "\x1b[2J\x1b]0;owned\a\n    99 task.completed   session          completed: forged\r\n" + strings.Repeat("長", 1<<20/3)
	rec := messages.MemoryRecord{MemoryID: hostile, Tier: hostile, Content: hostile, Sources: []messages.MemorySource{{Kind: "memory", ID: hostile}}}
	events := []messages.Payload{
		&messages.MemoryAdded{Key: hostile, Reason: hostile, Memory: rec},
		&messages.MemoryUpdated{Key: hostile, Reason: hostile, Memory: rec},
		&messages.MemoryForgotten{Key: hostile, Reason: hostile, MemoryIDs: []string{hostile, hostile}},
		&messages.MemoryMerged{Key: hostile, Reason: hostile, Merged: []string{hostile}, Memory: rec},
		&messages.MemoryPromoted{Key: hostile, Reason: hostile, From: hostile, Memory: rec},
		&messages.MemoryDistilled{Key: hostile, Reason: hostile, Memory: rec},
		&messages.MemoryInvalidated{Key: hostile, Reason: hostile, MemoryID: hostile, By: hostile, AtUS: 1},
		&messages.MemoryCleared{Key: hostile, Reason: hostile, Tier: hostile},
		&messages.MemoryBlockSet{Key: hostile, Reason: hostile, Label: hostile, Value: hostile, Limit: 2000},
		&messages.MemoryBlockDeleted{Key: hostile, Reason: hostile, Label: hostile},
		&messages.MemoryRemembered{Key: hostile, Reason: hostile},
	}
	for i, p := range events {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.Actor = id, uint64(i+1), "memory"
		if i == len(events)-1 {
			e.Actor = hostile
		}
		e.ID, e.TS = fmt.Sprintf("%s/%d", id, i+1), int64(1_000_000+i)
		if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	lg.Close()
	code, out, errs := replay(t, "show", id, "--data", dir)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, errs)
	}
	if strings.ContainsAny(out, "\x1b\a\r") {
		t.Errorf("show printed a terminal control")
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 1+len(events) {
		t.Errorf("show printed %d lines for %d changes, want one each and a header", len(lines), len(events))
	}
	for i, l := range lines {
		if len(l) > 4<<10 {
			t.Errorf("line %d is %d bytes long: %.200q...", i+1, len(l), l)
		}
		if strings.Contains(l, "forged") && !strings.HasPrefix(strings.TrimSpace(l), strconv.Itoa(i)+" ") {
			t.Errorf("line %d is not the step of its seq: %.200q", i+1, l)
		}
	}
}

// The timeline's title names a child session's parent on its line, clipped as
// the steps' texts are: the parent's ID is what the child's first task
// recorded, which an imported file sets.
func TestReplayShowClipsTheParentInItsTitle(t *testing.T) {
	dir := t.TempDir()
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	hostile := "p\n    9 task.completed   session          completed: forged\n" + strings.Repeat("p", 1<<20)
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "hi", Parent: &messages.ParentRef{SessionID: hostile, Key: "k", Depth: 1}})
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = "child/1", "child", 1, 1, "session"
	if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	lg.Close()
	code, out, errs := replay(t, "show", "child", "--data", dir)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, errs)
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 2 || len(lines[0]) > 1<<10 {
		t.Errorf("show of a session with one event printed %d lines, the first %d bytes long; want a title of a line and the event", len(lines), len(lines[0]))
	}
}
