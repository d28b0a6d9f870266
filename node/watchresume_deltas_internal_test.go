package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// gatedLog is an event log whose reads of a session past its first event (a
// WatchResuming feed's catch-up) say so on entered, then wait for release.
type gatedLog struct {
	eventlog.Log
	entered, release chan struct{}
}

func (l *gatedLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if from > 1 {
		l.entered <- struct{}{}
		<-l.release
	}
	return l.Log.Read(ctx, session, from)
}

// A WatchResuming feed that fell behind while a model call streamed watches again,
// and its new watcher is caught up on the call (its text so far, then its next
// deltas); when the call is answered before the catch-up read of the log returns,
// that read hands on the call's model.responded first, and the deltas the new
// watcher holds came after it: node run --stream printed fragments of the call
// after its answer. The feed now hands on no delta of a call it handed the answer
// of.
func TestWatchResumingHandsNoDeltaAfterItsCallsAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	gate := &gatedLog{Log: lg, entered: make(chan struct{}), release: make(chan struct{})}
	n := &Node{hub: newHub(nil, nil), log: gate, stopping: make(chan struct{})}
	out, stop, _ := n.WatchResuming(ctx, "s", true, 0)
	defer stop()

	record := func(seq uint64, typ messages.Type, causation string) {
		t.Helper()
		e := messages.Envelope{ID: fmt.Sprintf("e%d", seq), SessionID: "s", Seq: seq, Type: typ, CausationID: causation, Version: 1, Actor: "session", Payload: []byte(`{}`)}
		if err := lg.Append(ctx, []messages.Envelope{e}); err != nil {
			t.Fatal(err)
		}
		n.hub.deliver("s", []messages.Envelope{e})
	}
	delta := func(seq uint64, text string) messages.ModelDelta {
		return messages.ModelDelta{Key: "s/2", Step: 1, Seq: seq, Attempt: 1, Content: text}
	}
	record(1, messages.TypeTaskSubmitted, "")
	record(2, messages.TypeModelRequested, "")
	n.hub.openCall("s", "s/2")
	n.hub.deliverDeltas("s", "", delta(1, "one "))
	// A burst past the watcher's channel and backlog, unread: the feed falls behind.
	const burst = deltaWatcherBuffer + watcherBacklog + 10
	for i := range uint64(burst) {
		record(3+i, messages.TypeTeamStateUpdated, "")
	}
	answered := uint64(3 + burst)

	var got []messages.Envelope
	for caughtUp := false; !caughtUp; {
		select {
		case e, ok := <-out:
			if !ok {
				t.Fatal("the feed closed")
			}
			got = append(got, e)
		case <-gate.entered: // it watches again, and reads what it missed
			caughtUp = true
		case <-ctx.Done():
			t.Fatal("the feed did not fall behind")
		}
	}
	// The call ends and is answered while the log is read.
	n.hub.deliverDeltas("s", "", delta(2, "two "))
	n.hub.endDeltas("s", "", messages.DeltaEnd{Key: "s/2", Sent: 2})
	record(answered, messages.TypeModelResponded, "s/2")
	record(answered+1, messages.TypeTaskCompleted, "")
	close(gate.release)
	record(answered+2, messages.TypeTaskSubmitted, "") // the next task: after everything above
	for len(got) == 0 || got[len(got)-1].Seq != answered+2 {
		select {
		case e, ok := <-out:
			if !ok {
				t.Fatal("the feed closed")
			}
			got = append(got, e)
		case <-ctx.Done():
			t.Fatal("no end")
		}
	}

	var last uint64
	isAnswered := false
	for _, e := range got {
		if e.Type == messages.TypeModelDelta {
			if isAnswered {
				t.Fatalf("a delta of call s/2 after its answer: %s", feedEntry(t, e))
			}
			continue
		}
		if e.Seq != last+1 {
			t.Fatalf("event seq %d after %d: want every event once, in order", e.Seq, last)
		}
		last = e.Seq
		isAnswered = isAnswered || e.Type == messages.TypeModelResponded
	}
}
