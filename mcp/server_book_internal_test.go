package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// heldLog is a log whose first Append to one stream waits until released: a
// durable write that takes long. It counts the appends the log refused with
// eventlog.ErrSeqConflict.
type heldLog struct {
	eventlog.Log
	stream   string
	held     chan struct{} // closed when the held Append waits
	release  chan struct{}
	once     sync.Once
	mu       sync.Mutex
	conflict int
}

func newHeldLog(t *testing.T, stream string) *heldLog {
	t.Helper()
	l, err := sqlite.Open(t.Context(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	h := &heldLog{Log: l, stream: stream, held: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.free) // a test that fails leaves no Append waiting
	return h
}

func (h *heldLog) free() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *heldLog) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && events[0].SessionID == h.stream {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	err := h.Log.Append(ctx, events)
	if errors.Is(err, eventlog.ErrSeqConflict) {
		h.mu.Lock()
		h.conflict++
		h.mu.Unlock()
	}
	return err
}

// await fails the test unless ch closes within a deadline.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20 s", what)
	}
}

// recordAsync records p to session id in the background; the channel it returns
// closes once the record returned, with its error in *err.
func recordAsync(b *sessionBook, id string, p messages.Payload, err *error) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		*err = b.record(ctx, id, func(*sessionState) (messages.Payload, error) { return p, nil })
	}()
	return done
}

// A session's record whose append takes long holds back no other session's: the
// book locks each session apart, not the whole server.
func TestSessionBookRecordsOfSessionsDoNotWait(t *testing.T) {
	h := newHeldLog(t, sessionStream("A"))
	b := newBook(h)
	var errA, errB error
	doneA := recordAsync(b, "A", &messages.MCPLevelSet{Level: "debug"}, &errA)
	await(t, h.held, "session A's append")

	doneB := recordAsync(b, "B", &messages.MCPSubscribed{URI: "notes://b"}, &errB)
	await(t, doneB, "session B's record while session A's append waits")
	if errB != nil {
		t.Fatalf("session B's record: %v", errB)
	}
	stateB := make(chan struct{})
	var st sessionState
	var errState error
	go func() {
		defer close(stateB)
		st, errState = b.state(context.Background(), "B")
	}()
	await(t, stateB, "session B's state while session A's append waits")
	if errState != nil || !slices.Equal(st.subs, []string{"notes://b"}) || st.seq != 1 {
		t.Fatalf("session B's state: seq %d, subs %q, %v; want seq 1 and its subscription", st.seq, st.subs, errState)
	}
	select {
	case <-doneA:
		t.Fatalf("session A's record returned (%v) while its append waits", errA)
	default:
	}

	h.free()
	await(t, doneA, "session A's record once its append is done")
	if errA != nil {
		t.Fatalf("session A's record: %v", errA)
	}
	events, err := h.Read(t.Context(), sessionStream("A"), 1)
	if err != nil || len(events) != 1 || events[0].Type != messages.TypeMCPLevelSet {
		t.Fatalf("session A's stream: %d events, %v; want its level", len(events), err)
	}
	wantNoLocks(t, b)
}

// The records of one session still take turns: the second reads what the first
// appended and appends at the next seq, without a conflict, and none is lost.
func TestSessionBookRecordsOfOneSessionTakeTurns(t *testing.T) {
	h := newHeldLog(t, sessionStream("S"))
	b := newBook(h)
	var err1, err2 error
	done1 := recordAsync(b, "S", &messages.MCPSubscribed{URI: "notes://1"}, &err1)
	await(t, h.held, "the first record's append")
	done2 := recordAsync(b, "S", &messages.MCPSubscribed{URI: "notes://2"}, &err2)
	waiting := make(chan struct{})
	go func() { // until the second record waits for the session's turn
		defer close(waiting)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			b.mu.Lock()
			l := b.locks["S"]
			users := 0
			if l != nil {
				users = l.users
			}
			b.mu.Unlock()
			if users == 2 {
				return
			}
			select {
			case <-done2:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	await(t, waiting, "the second record of the session")
	select {
	case <-done2:
		t.Fatalf("the second record returned (%v) while the first one's append waits", err2)
	default:
	}
	h.free()
	await(t, done1, "the first record")
	await(t, done2, "the second record")
	if err1 != nil || err2 != nil {
		t.Fatalf("records: %v, %v", err1, err2)
	}
	if h.conflict != 0 {
		t.Errorf("%d appends conflicted; the records of one session should take turns", h.conflict)
	}
	events, err := h.Read(t.Context(), sessionStream("S"), 1)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Errorf("event %d at seq %d", i, e.Seq)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, p.(*messages.MCPSubscribed).URI)
	}
	if !slices.Equal(uris, []string{"notes://1", "notes://2"}) {
		t.Errorf("the session's stream holds %q; want both subscriptions, in turn", uris)
	}
	st, err := b.state(t.Context(), "S")
	if err != nil || st.seq != 2 || len(st.subs) != 2 {
		t.Errorf("the session's state: seq %d, subs %q, %v; want both", st.seq, st.subs, err)
	}
	wantNoLocks(t, b)
}

// wantNoLocks checks that the book keeps no lock of a session no call uses.
func wantNoLocks(t *testing.T, b *sessionBook) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.locks) != 0 {
		t.Errorf("the book keeps %d sessions' locks after their calls returned", len(b.locks))
	}
}

// Past maxStates the book drops the states it keeps, one in use too: its record
// goes on, and the session's next call reads the stream again, so that it
// appends at the next seq and loses nothing.
func TestSessionBookDropsStatesInUse(t *testing.T) {
	h := newHeldLog(t, sessionStream("A"))
	b := newBook(h)
	var errA error
	doneA := recordAsync(b, "A", &messages.MCPSubscribed{URI: "notes://1"}, &errA)
	await(t, h.held, "session A's append")
	filled := make(chan struct{})
	var errFill error
	go func() { // other sessions' calls, past maxStates, while A's record waits
		defer close(filled)
		for i := range maxStates + 1 {
			if _, errFill = b.state(t.Context(), fmt.Sprint("other-", i)); errFill != nil {
				return
			}
		}
	}()
	await(t, filled, "the other sessions' calls while session A's append waits")
	if errFill != nil {
		t.Fatal(errFill)
	}
	b.mu.Lock()
	_, kept := b.states["A"]
	b.mu.Unlock()
	if kept {
		t.Fatal("session A's state outlived maxStates other sessions' calls")
	}
	h.free()
	await(t, doneA, "session A's record")
	if errA != nil {
		t.Fatalf("session A's record: %v", errA)
	}
	var errA2 error
	await(t, recordAsync(b, "A", &messages.MCPSubscribed{URI: "notes://2"}, &errA2), "session A's second record")
	if errA2 != nil || h.conflict != 0 {
		t.Fatalf("session A's second record: %v (%d conflicts); want it at the next seq", errA2, h.conflict)
	}
	st, err := b.state(t.Context(), "A")
	if err != nil || st.seq != 2 || !slices.Equal(st.subs, []string{"notes://1", "notes://2"}) {
		t.Fatalf("session A's state: seq %d, subs %q, %v; want both subscriptions", st.seq, st.subs, err)
	}
	wantNoLocks(t, b)
}
