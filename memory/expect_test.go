package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// versions returns the versions of ns's memories by ID.
func versions(ns *memory.Namespace) map[string]uint64 {
	v := map[string]uint64{}
	for _, m := range ns.Snapshot() {
		v[m.ID] = m.Version
	}
	return v
}

// A memory's version is the seq of the event that last changed it, folded from the
// stream: another process folding the same stream (a node, a replay) gets the same.
func TestVersionIsTheSeqOfTheLastChange(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t)
	ns := f.ns(t, "user:v")
	res := add(t, ns, "k1", memory.AddRequest{Tier: memory.Semantic, Content: "Alice lives in Lisbon"},
		memory.AddRequest{Tier: memory.Semantic, Content: "Bob works at Acme"},
		memory.AddRequest{Tier: memory.Semantic, Content: "Carol plays the cello"})
	a, b, c := res[0].ID, res[1].ID, res[2].ID
	if v := versions(ns); v[a] != 1 || v[b] != 2 || v[c] != 3 {
		t.Fatalf("versions after the adds: %v, want 1, 2, 3", v)
	}
	if _, err := ns.Update(ctx, "k2", a, memory.UpdateRequest{Metadata: json.RawMessage(`{"src":"chat"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Invalidate(ctx, "k3", b, a, "contradicted"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Merge(ctx, "k4", a, []string{c}, "dup"); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{a: 6, b: 5}
	if v := versions(ns); len(v) != 2 || v[a] != want[a] || v[b] != want[b] {
		t.Fatalf("versions: %v, want %v (the update 4, the invalidation 5, the merge into %s 6)", v, want, a)
	}
	other, err := memory.Open(memory.Config{Log: f.log, Vectors: openStore(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Namespace(ctx, "user:v")
	if err != nil {
		t.Fatal(err)
	}
	if v := versions(theirs); len(v) != 2 || v[a] != want[a] || v[b] != want[b] {
		t.Fatalf("versions folded by another process: %v, want %v", v, want)
	}
	m, _ := ns.Get(a)
	if raw, _ := json.Marshal(m); !strings.Contains(string(raw), `"version":6`) {
		t.Errorf("a memory's JSON lacks its version: %s", raw)
	}
}

// casOps are the writes that take Expect: each stands on the memories a and b of a
// namespace of three episodic memories.
var casOps = []struct {
	name string
	do   func(ctx context.Context, ns *memory.Namespace, key, a, b string, opt memory.WriteOption) error
}{
	{"forget", func(ctx context.Context, ns *memory.Namespace, key, a, b string, opt memory.WriteOption) error {
		return ns.Forget(ctx, key, []string{a, b}, "old", opt)
	}},
	{"merge", func(ctx context.Context, ns *memory.Namespace, key, a, b string, opt memory.WriteOption) error {
		_, err := ns.Merge(ctx, key, b, []string{a}, "dup", opt)
		return err
	}},
	{"promote", func(ctx context.Context, ns *memory.Namespace, key, a, _ string, opt memory.WriteOption) error {
		_, err := ns.Promote(ctx, key, a, memory.Semantic, "important", opt)
		return err
	}},
	{"distill", func(ctx context.Context, ns *memory.Namespace, key, a, b string, opt memory.WriteOption) error {
		_, err := ns.Distill(ctx, key, []string{a, b}, "Alice likes tea", 0.6, "cluster", opt)
		return err
	}},
	{"invalidate", func(ctx context.Context, ns *memory.Namespace, key, a, b string, opt memory.WriteOption) error {
		return ns.Invalidate(ctx, key, a, b, "contradicted", opt)
	}},
}

// Each write given the versions its memories were read at is refused, with
// ErrChanged and nothing written, once another writer changed one of them (its
// content, importance or metadata: any event), and made with the versions as they
// are now.
func TestWriteWithAStaleVersionIsRefused(t *testing.T) {
	for _, op := range casOps {
		for _, changed := range []string{"a", "b"} {
			t.Run(op.name+"/"+changed, func(t *testing.T) {
				ctx := testCtx(t)
				f := newFixture(t)
				ns := f.ns(t, "user:cas")
				res := add(t, ns, "k1", memory.AddRequest{Tier: memory.Episodic, Content: "Alice drank green tea"},
					memory.AddRequest{Tier: memory.Episodic, Content: "Alice ordered green tea again"},
					memory.AddRequest{Tier: memory.Episodic, Content: "Bob went to Rome"})
				a, b := res[0].ID, res[1].ID
				read := versions(ns)
				id := map[string]string{"a": a, "b": b}[changed]
				if _, err := ns.Update(ctx, "user-edit", id, memory.UpdateRequest{Importance: imp(0.9)}); err != nil {
					t.Fatal(err)
				}
				before := ns.Stats().Seq
				err := op.do(ctx, ns, "cas", a, b, memory.Expect(map[string]uint64{a: read[a], b: read[b]}))
				if !errors.Is(err, memory.ErrChanged) || !strings.Contains(err.Error(), id) {
					t.Fatalf("stale write: %v, want ErrChanged naming %s", err, id)
				}
				if after := ns.Stats().Seq; after != before || len(events(t, f.log, "user:cas")) != int(before) {
					t.Fatalf("the refused write wrote: seq %d, was %d", after, before)
				}
				if err := op.do(ctx, ns, "cas", a, b, memory.Expect(versions(ns))); err != nil {
					t.Fatalf("write with the current versions: %v", err)
				}
				if after := ns.Stats().Seq; after == before {
					t.Fatalf("the write with the current versions wrote nothing")
				}
			})
		}
	}
}

// A memory Expect names that is gone is ErrNotFound, as for the write's own IDs.
func TestExpectOfAMemoryGoneIsNotFound(t *testing.T) {
	ctx := testCtx(t)
	ns := newFixture(t).ns(t, "user:cas")
	res := add(t, ns, "k1", memory.AddRequest{Tier: memory.Episodic, Content: "Alice drank green tea"},
		memory.AddRequest{Tier: memory.Episodic, Content: "Bob went to Rome"})
	read := versions(ns)
	if err := ns.Forget(ctx, "gone", []string{res[1].ID}, "user"); err != nil {
		t.Fatal(err)
	}
	_, err := ns.Promote(ctx, "p", res[0].ID, memory.Semantic, "x", memory.Expect(read))
	if !errors.Is(err, memory.ErrNotFound) {
		t.Fatalf("promote expecting a memory gone: %v, want ErrNotFound", err)
	}
}

// armedLog runs the function armed, once, before the next Append made through it.
type armedLog struct {
	eventlog.Log
	mu     sync.Mutex
	before func()
}

func (l *armedLog) arm(f func()) { l.mu.Lock(); l.before = f; l.mu.Unlock() }

func (l *armedLog) Append(ctx context.Context, events []messages.Envelope) error {
	l.mu.Lock()
	f := l.before
	l.before = nil
	l.mu.Unlock()
	if f != nil {
		f()
	}
	return l.Log.Append(ctx, events)
}

// The check reads the stream as stored, atomically with the write's append: a
// change another process appended, before this process folded it or while its
// write was in flight (its append then loses its seq, and the write is decided
// again), refuses the write.
func TestExpectSeesAnotherProcesssChange(t *testing.T) {
	for _, when := range []string{"before the write", "during the append"} {
		t.Run(when, func(t *testing.T) {
			ctx := testCtx(t)
			log := openLog(t, t.TempDir(), false)
			al := &armedLog{Log: log}
			mine, err := memory.Open(memory.Config{Log: al, Vectors: openStore(t, "")})
			if err != nil {
				t.Fatal(err)
			}
			ns, err := mine.Namespace(ctx, "user:shared")
			if err != nil {
				t.Fatal(err)
			}
			res := add(t, ns, "k1", memory.AddRequest{Tier: memory.Episodic, Content: "Alice drank green tea"})
			id := res[0].ID
			read := versions(ns)
			other, err := memory.Open(memory.Config{Log: log, Vectors: openStore(t, "")})
			if err != nil {
				t.Fatal(err)
			}
			theirs, err := other.Namespace(ctx, "user:shared")
			if err != nil {
				t.Fatal(err)
			}
			reweigh := func() {
				if _, err := theirs.Update(ctx, "their-edit", id, memory.UpdateRequest{Importance: imp(0.95)}); err != nil {
					t.Error(err)
				}
			}
			if when == "before the write" {
				reweigh()
			} else {
				al.arm(reweigh)
			}
			err = ns.Forget(ctx, "mine", []string{id}, "old", memory.Expect(read))
			if !errors.Is(err, memory.ErrChanged) {
				t.Fatalf("forget after another process re-weighed the memory: %v, want ErrChanged", err)
			}
			if m, ok := ns.Get(id); !ok || m.Importance != 0.95 {
				t.Fatalf("the memory as this process sees it: %+v, %v", m, ok)
			}
		})
	}
}
