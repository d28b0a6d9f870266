package memory_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

// A namespace's stream holding memory events of a type this build does not know
// (a later build's: memory.remembered was one to the builds before it, which
// then failed the whole namespace) stays readable: its fold skips them, telling
// Config.Skipped once per type, and folds the events it knows around them.
// Refresh, Search, Remember and History work, in the process that had it open
// and in one that folds it afresh. An event of another kind, or of a known type
// in a newer version, still fails the fold.
func TestMemoryFoldSkipsAnUnknownMemoryEventType(t *testing.T) {
	var mu sync.Mutex
	var told []string
	skipped := func(cfg *memory.Config) {
		cfg.Skipped = func(ns string, typ messages.Type, seq uint64) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, fmt.Sprintf("%s %s %d", ns, typ, seq))
		}
	}
	f := newWriteFixture(t, nil, skipped)
	ns := f.ns(t, "user:bob")
	if _, err := ns.Remember(wctx(t), "s-1/2/t1", userTurn("I live in Paris."), memory.RememberOptions{}); err != nil {
		t.Fatal(err)
	}
	// A later build's events, between this build's.
	appendRaw := func(log eventlog.Log, typ messages.Type, v int, payload string) {
		t.Helper()
		events, err := log.Read(wctx(t), memory.Stream("user:bob"), 1)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events)) + 1
		e := messages.Envelope{ID: fmt.Sprintf("mem-future-%d", seq), SessionID: memory.Stream("user:bob"), Seq: seq, Type: typ, Version: v,
			TS: events[len(events)-1].TS + 1, Actor: "memory", Payload: []byte(payload)}
		if err := log.Append(wctx(t), []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
	}
	appendRaw(f.log, "memory.future_thing", 1, `{"key":"s-9/2/t9","what":"a later build's"}`)
	appendRaw(f.log, "memory.future_thing", 1, `{"key":"s-9/4/t9"}`)

	if err := ns.Refresh(wctx(t)); err != nil {
		t.Fatalf("refresh over the unknown events: %v", err)
	}
	if _, err := ns.Remember(wctx(t), "s-1/4/t2", userTurn("I like cheese."), memory.RememberOptions{}); err != nil {
		t.Fatalf("remember after the unknown events: %v", err)
	}
	appendRaw(f.log, "memory.future_thing", 1, `{}`)

	// Another process folds the stream afresh.
	store, err := vectorstore.Open(vectorstore.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg := memory.Config{Log: f.log, Vectors: store}
	skipped(&cfg)
	other, err := memory.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	fresh, err := other.Namespace(wctx(t), "user:bob")
	if err != nil {
		t.Fatalf("a fresh fold of the namespace: %v", err)
	}
	for name, n := range map[string]*memory.Namespace{"open": ns, "fresh": fresh} {
		if err := n.Refresh(wctx(t)); err != nil {
			t.Fatalf("%s: refresh: %v", name, err)
		}
		for _, q := range []string{"Paris", "cheese"} {
			rs, err := n.Search(wctx(t), memory.Query{Text: q, Mode: memory.ModeKeyword})
			if err != nil || len(rs) != 2 || !strings.Contains(rs[0].Memory.Content, q) {
				t.Fatalf("%s: search %q: %+v %v", name, q, rs, err)
			}
			if h, err := n.History(wctx(t), rs[0].Memory.ID); err != nil || len(h) != 1 {
				t.Fatalf("%s: history of %q: %+v %v", name, q, h, err)
			}
		}
		if !n.RememberedUnder("s-1/2/t1") || !n.RememberedUnder("s-1/4/t2") || n.RememberedUnder("s-9/2/t9") {
			t.Errorf("%s: the known writes' keys are not folded as they are, or an unknown event's is", name)
		}
	}
	if _, err := fresh.Remember(wctx(t), "s-1/6/t3", userTurn("I work in Lyon."), memory.RememberOptions{}); err != nil {
		t.Fatalf("remember in the fresh fold: %v", err)
	}
	mu.Lock()
	// Once per type and process: the first process was told as it refreshed, the
	// second as it folded afresh, each of the first event of the type.
	if len(told) != 2 || told[0] != "user:bob memory.future_thing 2" || told[1] != told[0] {
		t.Errorf("Skipped was told %q, want once by each process, of the first event of the type", told)
	}
	mu.Unlock()

	// Not skipped: an event of another kind, or a known type in a newer version.
	for _, c := range []struct {
		typ  messages.Type
		v    int
		want error
	}{{"kb.future_thing", 1, messages.ErrUnknownType}, {messages.TypeMemoryAdded, 99, messages.ErrFutureVersion}} {
		g := newWriteFixture(t, nil)
		gns := g.ns(t, "user:bob")
		if _, err := gns.Remember(wctx(t), "s-1/2/t1", userTurn("I live in Paris."), memory.RememberOptions{}); err != nil {
			t.Fatal(err)
		}
		appendRaw(g.log, c.typ, c.v, `{}`)
		if err := gns.Refresh(wctx(t)); !errors.Is(err, c.want) {
			t.Errorf("a %s v%d in the stream: refresh %v, want %v", c.typ, c.v, err, c.want)
		}
	}
}
