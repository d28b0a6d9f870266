package entity_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/entity"
	"github.com/troupe-run/troupe/messages"
)

// resettable is the notes fold a Batch can roll back.
type resettable struct {
	*notes
	resets int
}

func (r *resettable) Reset() {
	r.resets++
	*r.notes = notes{keys: map[string]bool{}}
}

// gatedLog counts the Appends, holds the first until open is closed, and lets
// steal (when set) run before the Append it is due for.
type gatedLog struct {
	eventlog.Log
	mu      sync.Mutex
	appends int
	entered chan struct{} // closed when the first Append starts
	open    chan struct{}
	before  func(n int) // called before Append number n (1-based)
}

func (l *gatedLog) Append(ctx context.Context, events []messages.Envelope) error {
	l.mu.Lock()
	l.appends++
	n := l.appends
	l.mu.Unlock()
	if n == 1 {
		close(l.entered)
		<-l.open
	}
	if l.before != nil {
		l.before(n)
	}
	return l.Log.Append(ctx, events)
}

func (l *gatedLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.appends
}

// waitQueued waits (with a deadline) until n writes wait in b.
func waitQueued(t *testing.T, b *entity.Batch, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for b.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", b.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The writes queued while an Append is in flight are decided one after another,
// each against the fold with the ones before it, and appended in one Append; a key
// twice in the batch is made once; a refused change fails its write alone.
func TestBatchAppendsQueuedWritesTogether(t *testing.T) {
	ctx := context.Background()
	l := &gatedLog{Log: open(t), entered: make(chan struct{}), open: make(chan struct{})}
	var mu sync.Mutex
	f := &resettable{notes: &notes{keys: map[string]bool{}}}
	b := &entity.Batch{Stream: stream(l), Fold: f, Lock: &mu, Max: 100}

	type result struct {
		applied, done bool
		err           error
	}
	const n = 64
	results := make([]result, n+2)
	var wg sync.WaitGroup
	write := func(i int, key string, change func(context.Context) ([]messages.Payload, error)) {
		defer wg.Done()
		r := &results[i]
		r.err = b.Write(ctx, key, change, func(applied bool) { r.applied, r.done = applied, true })
	}
	wg.Add(1)
	go write(0, "k0", add("k0", "note 0"))
	<-l.entered
	for i := 1; i < n; i++ {
		wg.Add(1)
		go write(i, fmt.Sprintf("k%d", i), add(fmt.Sprintf("k%d", i), fmt.Sprintf("note %d", i)))
	}
	refused := errors.New("refused input")
	wg.Add(2)
	go write(n, "bad", func(context.Context) ([]messages.Payload, error) { return nil, refused })
	go write(n+1, "k1", add("k1", "note 1 again"))
	waitQueued(t, b, n+1)
	close(l.open)
	wg.Wait()

	if got := l.count(); got != 2 {
		t.Errorf("%d writes made %d Appends, want 2 (the first, then the %d queued behind it together)", n+2, got, n+1)
	}
	for i := range n {
		if r := results[i]; i != 1 && (r.err != nil || !r.done || r.applied) {
			t.Errorf("write %d: %+v; want made, no error", i, r)
		}
	}
	if r := results[n]; !errors.Is(r.err, refused) || r.done {
		t.Errorf("the refused write: %+v; want its own error", r)
	}
	// k1 again: made by whichever of the two was decided first; both succeed.
	if r1, r2 := results[1], results[n+1]; r1.err != nil || r2.err != nil || r1.applied == r2.applied {
		t.Errorf("key k1 twice: %+v and %+v; want one made, one applied", r1, r2)
	}
	events, err := l.Read(ctx, "test/notes", 1)
	if err != nil || len(events) != n {
		t.Fatalf("stored %d events (%v), want %d", len(events), err, n)
	}
	keys := map[string]bool{}
	for i, e := range events {
		p, _ := e.Decode()
		k := p.(*messages.NoteAdded).Key
		if keys[k] || e.Seq != uint64(i+1) {
			t.Errorf("event %d: key %s at seq %d: repeated or out of place", i, k, e.Seq)
		}
		keys[k] = true
	}
	// The fold is the log's: a fresh one folds the same.
	other := &notes{keys: map[string]bool{}}
	if err := stream(l).CatchUp(ctx, other); err != nil || !slices.Equal(other.texts, f.texts) {
		t.Errorf("a fresh fold: %q (%v); the batch's: %q", other.texts, err, f.texts)
	}
}

// When another writer takes the batch's seqs, its Append fails whole: the fold is
// reset, caught up, and every write decided again; a key the other writer stored
// answers applied, and nothing is stored twice.
func TestBatchDecidesAgainAfterASeqConflict(t *testing.T) {
	ctx := context.Background()
	base := open(t)
	l := &gatedLog{Log: base, entered: make(chan struct{}), open: make(chan struct{})}
	thief := stream(base)
	l.before = func(n int) {
		if n == 2 { // the batch's first Append: another writer stores k2 first
			if _, err := thief.Write(ctx, &notes{keys: map[string]bool{}}, "k2", add("k2", "k2 by the other writer")); err != nil {
				t.Error(err)
			}
		}
	}
	var mu sync.Mutex
	f := &resettable{notes: &notes{keys: map[string]bool{}}}
	b := &entity.Batch{Stream: stream(l), Fold: f, Lock: &mu}
	const n = 5
	applied := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("k%d", i)
			errs[i] = b.Write(ctx, k, add(k, k), func(a bool) { applied[i] = a })
		}()
		if i == 0 {
			<-l.entered
		}
	}
	waitQueued(t, b, n-1)
	close(l.open)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || applied[i] != (i == 2) {
			t.Errorf("write k%d: applied %v, err %v; want applied only for k2", i, applied[i], errs[i])
		}
	}
	if f.resets != 1 || l.count() != 3 {
		t.Errorf("%d resets, %d Appends; want 1 reset and 3 Appends (the first, the batch that lost, the batch again)", f.resets, l.count())
	}
	events, err := base.Read(ctx, "test/notes", 1)
	if err != nil || len(events) != n {
		t.Fatalf("stored %d events (%v), want %d, each key once", len(events), err, n)
	}
	if f.seq != n || len(f.texts) != n || f.texts[1] != "k2 by the other writer" {
		t.Errorf("the fold: %q at seq %d", f.texts, f.seq)
	}
}

// A writer is told its write ended only once the batch released Lock: a write
// that returned found the lock still held while the batch ended its other
// writes, so that a memory namespace released right after a write (its release
// takes the lock only if it is free) stayed loaded (CI's race run of
// memory's TestAWriteThroughAReleasedNamespaceLeavesNoBacklog).
func TestBatchWriterReturnsWithTheLockFree(t *testing.T) {
	ctx := context.Background()
	l := &gatedLog{Log: open(t), entered: make(chan struct{}), open: make(chan struct{})}
	var mu sync.Mutex
	f := &resettable{notes: &notes{keys: map[string]bool{}}}
	b := &entity.Batch{Stream: stream(l), Fold: f, Lock: &mu}

	first := make(chan error, 1)
	go func() { first <- b.Write(ctx, "k0", add("k0", "note 0"), nil) }()
	<-l.entered
	checked := make(chan bool, 1)
	free := make(chan bool, 1)
	go func() {
		// Decided first in the batch queued behind the held Append.
		err := b.Write(ctx, "ka", add("ka", "note a"), nil)
		ok := mu.TryLock()
		if ok {
			mu.Unlock()
		}
		free <- ok && err == nil
		checked <- true
	}()
	waitQueued(t, b, 1)
	second := make(chan error, 1)
	go func() {
		second <- b.Write(ctx, "kb", add("kb", "note b"), func(bool) {
			// Still in the batch, Lock held: give the first writer, if it was
			// told already, the time to look at the lock (a hang guard when not).
			select {
			case <-checked:
			case <-time.After(200 * time.Millisecond):
			}
		})
	}()
	waitQueued(t, b, 2)
	close(l.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if !<-free {
		t.Fatal("a write returned while the batch still held the stream's lock")
	}
}
