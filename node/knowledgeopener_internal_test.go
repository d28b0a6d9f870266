package node

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/knowledge"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

// readCounter is an event log that counts the reads of each stream.
type readCounter struct {
	eventlog.Log
	mu    sync.Mutex
	reads map[string]int
}

func (l *readCounter) Read(ctx context.Context, id string, from uint64) ([]messages.Envelope, error) {
	l.mu.Lock()
	l.reads[id]++
	l.mu.Unlock()
	return l.Log.Read(ctx, id, from)
}

func (l *readCounter) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads[id]
}

// The opener of the knowledge bases keeps no name past the bases the node holds:
// many bases opened then released leave it knowing none of them (the next open
// of one looks for it in the log again, then folds it), while a base that is
// loaded is opened without looking for it; a made-up name is refused, loading
// nothing.
func TestKBOpenerForgetsTheBasesReleased(t *testing.T) {
	ctx := context.Background()
	sl, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sl.Close() })
	store, err := vectorstore.Open(vectorstore.Config{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	log := &readCounter{Log: sl, reads: map[string]int{}}
	const maxBases = 2
	bs, err := knowledge.Open(knowledge.Config{Log: log, Vectors: store, MaxBases: maxBases, IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	o := &kbOpener{bs: bs, log: log}
	const bases = 30
	name := func(i int) string { return fmt.Sprintf("kb%d", i) }
	for i := range bases {
		b, err := bs.Base(ctx, name(i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddText(ctx, "a.md", fmt.Sprintf("# Base %d\n\nIt holds one document.", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := range bases {
		if _, err := o.existing(ctx, name(i)); err != nil {
			t.Fatalf("%s: %v", name(i), err)
		}
	}
	if n := bs.LoadedBases(); n > maxBases+1 {
		t.Fatalf("%d bases loaded; want at most %d (and the one last opened)", n, maxBases)
	}
	// Each released base is looked for in the log before it is folded again.
	checked := 0
	for i := range bases - maxBases {
		s := knowledge.Stream(name(i))
		before := log.count(s)
		if bs.Loaded(name(i)) {
			continue
		}
		if _, err := o.existing(ctx, name(i)); err != nil {
			t.Fatalf("%s again: %v", name(i), err)
		}
		// The look for it, its fold and its refresh: three reads (two when the
		// opener still knew the name).
		if got := log.count(s) - before; got != 3 {
			t.Fatalf("%s, released, opened again: %d reads of its stream; want 3: the opener forgets the name of a released base", name(i), got)
		}
		checked++
	}
	if checked < bases/2 {
		t.Fatalf("%d released bases opened again; want most of %d", checked, bases-maxBases)
	}
	// A base loaded now is opened without being looked for: the refresh's read only.
	last := name(bases - maxBases - 1)
	if !bs.Loaded(last) {
		t.Fatalf("%s, just opened, is not loaded", last)
	}
	before := log.count(knowledge.Stream(last))
	if _, err := o.existing(ctx, last); err != nil {
		t.Fatal(err)
	}
	if got := log.count(knowledge.Stream(last)) - before; got != 1 {
		t.Fatalf("%s, loaded, opened again: %d reads of its stream; want 1 (its refresh)", last, got)
	}
	loaded := bs.LoadedBases()
	if _, err := o.existing(ctx, "made-up"); !IsUnknownBase(err) {
		t.Fatalf("a made-up name: %v; want errNoBase", err)
	}
	if bs.LoadedBases() != loaded || bs.Loaded("made-up") {
		t.Fatal("a made-up name was loaded")
	}
}
