package notes_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// countingLog counts the Appends and holds the first one until open is closed.
type countingLog struct {
	eventlog.Log
	mu      sync.Mutex
	appends int
	entered chan struct{}
	open    chan struct{}
}

func (l *countingLog) Append(ctx context.Context, events []messages.Envelope) error {
	l.mu.Lock()
	l.appends++
	first := l.appends == 1
	l.mu.Unlock()
	if first {
		close(l.entered)
		<-l.open
	}
	return l.Log.Append(ctx, events)
}

// The notes added at once while an Append is in flight share the next Append:
// before, each took an Append of its own, one after another, so one agent's notes
// topped out near 10 writes/s on ClickHouse and a cluster's notes calls hit the
// tool timeout. Every caller still gets its own note, a caller whose change is
// refused gets its own error, and the stream holds each key once.
func TestConcurrentAddsShareAnAppend(t *testing.T) {
	ctx := testCtx(t)
	log := &countingLog{Log: openLog(t, t.TempDir(), false), entered: make(chan struct{}), open: make(chan struct{})}
	n := newNotes(t, notes.Config{Log: log})
	const callers = 64
	got := make([]notes.Note, callers)
	errs := make([]error, callers+1)
	var wg sync.WaitGroup
	add := func(i int) {
		defer wg.Done()
		got[i], errs[i] = n.Add(tools.WithCallKey(ctx, fmt.Sprintf("s/%d", i)), "fact", nil, fmt.Sprintf("body %d", i))
	}
	wg.Add(1)
	go add(0)
	<-log.entered
	for i := 1; i < callers; i++ {
		wg.Add(1)
		go add(i)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[callers] = n.Update(tools.WithCallKey(ctx, "s/bad"), "n999", nil, nil, ptr("no such note"))
	}()
	// A hang guard, not a timing: the writes queue at once when they are grouped.
	for deadline := time.Now().Add(10 * time.Second); n.QueuedWrites() < callers && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(log.open)
	wg.Wait()

	if log.appends > 2 {
		t.Errorf("%d concurrent notes changes made %d Appends, want 2 (the first, then the rest together)", callers+1, log.appends)
	}
	ids := map[string]int{}
	for i := range callers {
		if errs[i] != nil || got[i].Body != fmt.Sprintf("body %d", i) {
			t.Errorf("caller %d: %+v, %v; want its own note", i, got[i], errs[i])
			continue
		}
		if j, ok := ids[got[i].ID]; ok {
			t.Errorf("callers %d and %d both got note %s", j, i, got[i].ID)
		}
		ids[got[i].ID] = i
	}
	if !errors.Is(errs[callers], notes.ErrUnknownNote) {
		t.Errorf("the update of an unknown note: %v; want ErrUnknownNote for that caller alone", errs[callers])
	}
	events, err := log.Read(ctx, n.Stream(), 1)
	if err != nil || len(events) != callers {
		t.Fatalf("the stream holds %d events (%v), want %d", len(events), err, callers)
	}
	// A fresh fold of the stream (another node, a restart) finds every note where
	// its caller was told it is.
	fresh := newNotes(t, notes.Config{Log: log.Log})
	all, err := fresh.List(ctx, notes.Filter{Limit: notes.MaxLimit})
	if err != nil || all.Matched != callers {
		t.Fatalf("a fresh fold lists %d notes (%v), want %d", all.Matched, err, callers)
	}
	for _, note := range all.Notes {
		if i, ok := ids[note.ID]; !ok || note.Body != fmt.Sprintf("body %d", i) {
			t.Errorf("a fresh fold has note %s = %q, which no caller was told of", note.ID, note.Body)
		}
	}
	// The same keys again (calls redelivered after a crash): nothing new.
	for i := range callers {
		again, err := n.Add(tools.WithCallKey(ctx, fmt.Sprintf("s/%d", i)), "fact", nil, "another body")
		if err != nil || again.ID != got[i].ID {
			t.Fatalf("key s/%d again: %+v, %v; want note %s", i, again, err, got[i].ID)
		}
	}
	if events, _ := log.Read(ctx, n.Stream(), 1); len(events) != callers {
		t.Errorf("after the redeliveries the stream holds %d events, want %d", len(events), callers)
	}
}

func ptr[T any](v T) *T { return &v }
