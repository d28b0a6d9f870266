package entity_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/internal/entity"
	"github.com/troupe-run/troupe/messages"
)

// notes is a fold of a stream of note.added events: their texts, and the keys
// applied.
type notes struct {
	seq   uint64
	texts []string
	keys  map[string]bool
	syncs int
	fail  error // returned by Sync while set
}

func (n *notes) Seq() uint64 { return n.seq }
func (n *notes) Apply(e messages.Envelope) error {
	if e.Seq != n.seq+1 {
		return fmt.Errorf("folded seq %d after %d", e.Seq, n.seq)
	}
	p, err := e.Decode()
	if err != nil {
		return err
	}
	a := p.(*messages.NoteAdded)
	n.seq = e.Seq
	n.texts = append(n.texts, a.Body)
	if a.Key != "" {
		n.keys[a.Key] = true
	}
	return nil
}
func (n *notes) Sync(context.Context) error { n.syncs++; return n.fail }
func (n *notes) Applied(key string) bool    { return n.keys[key] }

var errConflict = errors.New("test: the stream kept changing")

func open(t *testing.T) eventlog.Log {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func stream(l eventlog.Log) *entity.Stream {
	return &entity.Stream{Log: l, ID: "test/notes", Kind: "test", IDPrefix: "t-", Now: time.Now, Conflict: errConflict}
}

func add(key, text string) func(context.Context) ([]messages.Payload, error) {
	return func(context.Context) ([]messages.Payload, error) {
		return []messages.Payload{&messages.NoteAdded{Key: key, Body: text}}, nil
	}
}

func TestWriteAppendsFoldsAndAppliesAKeyOnce(t *testing.T) {
	ctx := context.Background()
	l := open(t)
	s, n := stream(l), &notes{keys: map[string]bool{}}
	for i, want := range []bool{false, true} {
		applied, err := s.Write(ctx, n, "k1", add("k1", "first"))
		if err != nil || applied != want {
			t.Fatalf("write %d: applied %v, err %v; want %v, nil", i+1, applied, err, want)
		}
	}
	// The second write found its key applied: one event.
	if len(n.texts) != 1 || n.seq != 1 {
		t.Fatalf("fold: %v at seq %d, want one note at seq 1", n.texts, n.seq)
	}
	// Another fold of the same stream (another node) catches up and sees the key.
	other := &notes{keys: map[string]bool{}}
	applied, err := s.Write(ctx, other, "k1", add("k1", "again"))
	if err != nil || !applied {
		t.Fatalf("a fresh fold writing an applied key: applied %v, err %v; want true, nil", applied, err)
	}
	events, err := l.Read(ctx, "test/notes", 1)
	if err != nil || len(events) != 1 || events[0].Actor != "test" || events[0].ID[:2] != "t-" {
		t.Fatalf("stored: %+v, %v", events, err)
	}
}

func TestWriteDecidesAgainWhenAnotherWriterTookTheSeq(t *testing.T) {
	ctx := context.Background()
	l := open(t)
	s := stream(l)
	a, b := &notes{keys: map[string]bool{}}, &notes{keys: map[string]bool{}}
	if _, err := s.Write(ctx, a, "", add("", "from a")); err != nil {
		t.Fatal(err)
	}
	// b decides while a writes again in between: b's first append loses seq 2.
	calls := 0
	_, err := s.Write(ctx, b, "", func(ctx context.Context) ([]messages.Payload, error) {
		calls++
		if calls == 1 {
			if _, err := s.Write(ctx, a, "", add("", "from a again")); err != nil {
				return nil, err
			}
		}
		return []messages.Payload{&messages.NoteAdded{Body: fmt.Sprintf("from b, decision %d after %d notes", calls, len(b.texts))}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"from a", "from a again", "from b, decision 2 after 2 notes"}
	if fmt.Sprint(b.texts) != fmt.Sprint(want) {
		t.Fatalf("b folded %q, want %q", b.texts, want)
	}
}

func TestWriteRetriesAChangeWhoseOwnWriteLostItsSeq(t *testing.T) {
	ctx := context.Background()
	l := open(t)
	s, n := stream(l), &notes{keys: map[string]bool{}}
	calls := 0
	_, err := s.Write(ctx, n, "k", func(context.Context) ([]messages.Payload, error) {
		calls++
		if calls < 3 {
			return nil, fmt.Errorf("expiring: %w", eventlog.ErrSeqConflict)
		}
		return []messages.Payload{&messages.NoteAdded{Key: "k", Body: "done"}}, nil
	})
	if err != nil || calls != 3 || len(n.texts) != 1 {
		t.Fatalf("err %v after %d calls, folded %v; want nil after 3, one note", err, calls, n.texts)
	}
	// Other errors of the change are returned with nothing written.
	bad := errors.New("bad input")
	_, err = s.Write(ctx, n, "k2", func(context.Context) ([]messages.Payload, error) { return nil, bad })
	if !errors.Is(err, bad) || n.seq != 1 {
		t.Fatalf("err %v, seq %d; want the change's error and nothing written", err, n.seq)
	}
}

func TestWriteGivesUpAfterMaxAttempts(t *testing.T) {
	ctx := context.Background()
	s, n := stream(open(t)), &notes{keys: map[string]bool{}}
	calls := 0
	_, err := s.Write(ctx, n, "k", func(context.Context) ([]messages.Payload, error) {
		calls++
		return nil, eventlog.ErrSeqConflict
	})
	if !errors.Is(err, errConflict) || calls != entity.MaxAttempts {
		t.Fatalf("err %v after %d calls; want the stream's Conflict after %d", err, calls, entity.MaxAttempts)
	}
}

func TestWriteSaysTheChangeIsStoredWhenSyncFails(t *testing.T) {
	ctx := context.Background()
	l := open(t)
	s, n := stream(l), &notes{keys: map[string]bool{}}
	down := errors.New("vector store down")
	// Sync fails after the append: the change is stored and folded, and the error says so.
	_, err := s.Write(ctx, n, "k", func(context.Context) ([]messages.Payload, error) {
		n.fail = down
		return []messages.Payload{&messages.NoteAdded{Key: "k", Body: "kept"}}, nil
	})
	if !errors.Is(err, down) || n.seq != 1 {
		t.Fatalf("err %v, seq %d; want the sync's error after the event was stored", err, n.seq)
	}
	n.fail = nil
	if applied, err := s.Write(ctx, n, "k", add("k", "kept")); err != nil || !applied {
		t.Fatalf("the retried write: applied %v, err %v; want it found applied", applied, err)
	}
}

func TestClosedStopsReadsAndWrites(t *testing.T) {
	ctx := context.Background()
	s, n := stream(open(t)), &notes{keys: map[string]bool{}}
	closed := errors.New("closed")
	s.Closed = func() error { return closed }
	if _, err := s.Write(ctx, n, "", add("", "x")); !errors.Is(err, closed) {
		t.Fatalf("err %v, want closed", err)
	}
}

func TestLoadedMakesEachOnceAndOpensUntilItSucceeds(t *testing.T) {
	type entry struct {
		notes
		use entity.Use
	}
	r := entity.NewLoaded(func(e *entry) *entity.Use { return &e.use }, func(*entry, func(uint64)) bool { return true })
	made, opens := 0, 0
	mk := func() *entry { made++; return &entry{} }
	down := errors.New("down")
	fail := true
	open := func(*entry) error {
		opens++
		if fail {
			return down
		}
		return nil
	}
	now := time.Unix(0, 0)
	if _, _, err := r.Open("x", now, mk, open); !errors.Is(err, down) {
		t.Fatalf("err %v, want the open's error", err)
	}
	if r.Has("x") {
		t.Fatal("Has: an entity whose open failed is loaded")
	}
	fail = false
	a, _, err := r.Open("x", now, mk, open)
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := r.Open("x", now, mk, open)
	c, _, _ := r.Open("y", now, mk, open)
	if a != b || a == c || made != 2 || opens != 3 {
		t.Fatalf("made %d, opened %d times (want 2, 3); same entity %v, other %v", made, opens, a == b, a != c)
	}
	if !r.Has("x") || !r.Has("y") || r.Has("z") {
		t.Fatalf("Has x, y, z: %v %v %v; want the two opened only", r.Has("x"), r.Has("y"), r.Has("z"))
	}
	if n := r.Sweep(now.Add(time.Hour), time.Minute, 0, true, ""); n != 2 || r.Has("x") || r.Has("y") {
		t.Fatalf("after a sweep releasing %d (want 2): Has x %v, y %v", n, r.Has("x"), r.Has("y"))
	}
}
