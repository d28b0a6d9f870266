package main

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// A memory namespace's stream that holds a memory.remembered (the write after
// task of a turn that found nothing to keep) reads as any memory stream: list
// names it a memory namespace, show prints the mark with its reason and key,
// verify and export refuse it for being no session, and stats counts the mark as
// the operation "remembered".
func TestReplayReadsAMemoryStreamWithARememberedMark(t *testing.T) {
	dir := t.TempDir()
	id := "memory/agent:a"
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []messages.Payload{
		&messages.MemoryAdded{Key: "s-1/2/t1/0", Reason: "mem0 ADD: new fact", Memory: messages.MemoryRecord{MemoryID: "m1", Tier: "semantic", Content: "Alice lives in Lisbon."}},
		&messages.MemoryRemembered{Key: "s-2/2/t2", Reason: "remembered: nothing to keep: no fact in the turn"},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.Actor = id, uint64(i+1), "memory"
		e.ID, e.TS = id+"/"+string(rune('1'+i)), int64(1_000_000+i)
		if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	lg.Close()
	code, out, errs := replay(t, "list", "--data", dir)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("list: %d %q %q", code, out, errs)
	}
	code, out, errs = replay(t, "show", id, "--data", dir)
	if code != 0 || !strings.Contains(out, "memory.remembered") || !strings.Contains(out, "remembered: nothing to keep: no fact in the turn (s-2/2/t2)") {
		t.Fatalf("show: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = replay(t, "verify", id, "--data", dir)
	if code != 0 || !strings.Contains(out, "no session") {
		t.Fatalf("verify: %d %q %q", code, out, errs)
	}
	code, _, errs = replay(t, "export", id, "--data", dir, "--out", t.TempDir()+"/m.jsonl")
	if code != 1 || !strings.Contains(errs, "no session") {
		t.Fatalf("export: %d %q", code, errs)
	}
	code, out, errs = replay(t, "stats", "--data", dir, "--json")
	if code != 0 || !strings.Contains(out, `"op": "remembered"`) {
		t.Fatalf("stats: %d\n%s\n%s", code, out, errs)
	}
}

// A memory.remembered of an Add under a client's key whose every memory was
// stored already shows the key the client sent, as the record of its request,
// not the key with its request's digest (memory.RequestKey) that the event holds.
func TestReplayShowsAKeysRequestMarkUnderTheClientsKey(t *testing.T) {
	dir := t.TempDir()
	id := "memory/user:alice"
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	reason := "added nothing: every memory of the request is stored already"
	for i, p := range []messages.Payload{
		&messages.MemoryAdded{Key: memory.RequestKey("http/k1/user:alice", "d1"), Reason: "added", Memory: messages.MemoryRecord{MemoryID: "m1", Tier: "semantic", Content: "Alice likes tea."}},
		&messages.MemoryRemembered{Key: memory.RequestKey("http/k2/user:alice", "d2"), Reason: reason},
	} {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.Actor = id, uint64(i+1), "memory"
		e.ID, e.TS = id+"/"+string(rune('1'+i)), int64(1_000_000+i)
		if err := lg.Append(context.Background(), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	lg.Close()
	for _, args := range [][]string{{"show", id, "--data", dir}, {"show", id, "--data", dir, "--json"}} {
		code, out, errs := replay(t, args...)
		if code != 0 || !strings.Contains(out, reason+" (the request of key http/k2/user:alice)") || strings.Contains(out, "#request=") {
			t.Fatalf("%v: %d\n%s\n%s", args, code, out, errs)
		}
	}
}
