package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
)

// childReads is an event log that holds a parent session's events (a task that
// failed with its delegate calls unanswered) and answers the reads of its
// children with child (a log that does not answer, or fails).
type childReads struct {
	eventlog.Log
	parent string
	events []messages.Envelope
	child  func(ctx context.Context) error
	reads  atomic.Int64 // reads of the children begun
}

func (l *childReads) Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error) {
	if sessionID == l.parent {
		return l.events, nil
	}
	l.reads.Add(1)
	return nil, l.child(ctx)
}

// failedWithCalls returns the events of session's task t1, which requested calls
// delegate calls and failed unanswered.
func failedWithCalls(t *testing.T, session string, calls int) []messages.Envelope {
	t.Helper()
	var events []messages.Envelope
	add := func(p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.SessionID, e.Seq, e.CorrelationID = session, uint64(len(events)+1), "t1"
		e.ID = fmt.Sprintf("%s-%d", session, e.Seq)
		events = append(events, e)
	}
	add(&messages.TaskSubmitted{Input: "go"})
	for i := range calls {
		key := messages.EffectKey{SessionID: session, Seq: uint64(i + 2)}
		add(&messages.ToolCallRequested{Key: key.String(), Tool: DelegateTool, Arguments: `{"agent":"helper","task":"wait"}`})
	}
	add(&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "cancelled"})
	return events
}

// shardedForCancels is the part of a sharded node that cancels children.
func shardedForCancels(log eventlog.Log, pub *recordingPublisher) *Node {
	return &Node{cfg: Config{NodeID: "n1", Logger: slog.New(slog.DiscardHandler), IDs: actors.UUIDv7{}, SubmitTimeout: time.Hour,
		Bus: &Bus{Sharded: true, Partition: func(string, int) int { return 0 }}},
		log: log, pub: pub, ingress: newIngress(redact.New(), nil, actors.UUIDv7{}), metrics: newMetrics()}
}

// A node that closes just after a team with 8 delegate calls failed, its log not
// answering, ends the cancellation of the children once parentEnds's close times
// out, and cancels no more of them: each waited for the log for SubmitTimeout
// (30 s) under a context that close did not end, one after the other, and Close
// waited for them all.
func TestParentEndsCloseEndsTheCancellations(t *testing.T) {
	reading := make(chan struct{}, 8)
	log := &childReads{parent: "boss", events: failedWithCalls(t, "boss", 8), child: func(ctx context.Context) error {
		reading <- struct{}{}
		<-ctx.Done() // a log that does not answer
		return ctx.Err()
	}}
	pub := &recordingPublisher{}
	n := shardedForCancels(log, pub)
	p := newParentEnds(n)
	p.observe("boss", log.events)
	select {
	case <-reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the first child's status was never read")
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		p.close(time.Millisecond)
	}()
	select {
	case <-closed:
	case <-time.After(60 * time.Second): // a hang guard: the fix ends it at once
		t.Fatal("parentEnds.close still waits for the cancellations of the children after its timeout")
	}
	if got := log.reads.Load(); got != 1 {
		t.Errorf("children read after close's timeout: %d reads in all, want 1", got)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.msgs) != 0 {
		t.Errorf("cancellations sent after close's timeout: %d", len(pub.msgs))
	}
}

// A child whose status cannot be read (the log timed out) is cancelled all the
// same: the owner drops a cancellation of a session with no running task, and a
// child left alone runs until its deadline.
func TestCancelChildWhoseStatusCannotBeRead(t *testing.T) {
	log := &childReads{parent: "boss", child: func(context.Context) error {
		return errors.New("clickhouse: read timed out")
	}}
	pub := &recordingPublisher{}
	n := shardedForCancels(log, pub)
	n.cancelChild(context.Background(), "boss.sub4")
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if len(pub.msgs) != 1 {
		t.Fatalf("cancellations sent: %d, want 1", len(pub.msgs))
	}
	m := pub.msgs[0]
	if m.Metadata.Get(messages.MetaSessionID) != "boss.sub4" || m.Metadata.Get(messages.MetaType) != string(messages.TypeCancelRequested) ||
		!strings.Contains(string(m.Payload), "boss.sub4") {
		t.Errorf("sent %v %s", m.Metadata, m.Payload)
	}
}

// A child whose parent's task failed with the child's call unanswered, and whose
// cancellation the parent's node never sent (it closed with the cancellation
// queued, its session host stopped, or it crashed), is cancelled as a node starts
// and resumes it: it ran on for its 30 minutes, its model paid for nobody.
func TestResumedChildOfAFailedTaskIsCancelled(t *testing.T) {
	log, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	agents := []NamedAgent{{Name: "lead", Tools: []string{DelegateTool}}, {Name: "helper", Tools: []string{"calculator"}}}
	start := func(model *heldModel) (*Node, func()) {
		n, err := New(context.Background(), Config{DataDir: t.TempDir(), Log: log, Model: model, Agents: agents, HandoffGrace: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := n.Start(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n, stop
	}
	first := &heldModel{release: make(chan struct{})}
	t.Cleanup(func() { close(first.release) })
	n, stop := start(first)
	if _, err := n.Submit(context.Background(), Task{Input: "go", SessionID: "boss", Agent: "lead"}); err != nil {
		stop()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); first.helper.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("the child's model was never called")
		}
	}
	stop() // the parent and the child are unfinished
	// The parent's task failed, its delegate call unanswered, and nobody cancelled
	// the child: as the parent's node, closing, found its session host stopped.
	events, err := log.Read(context.Background(), "boss", 1)
	if err != nil || len(events) == 0 {
		t.Fatalf("the parent's events: %d, %v", len(events), err)
	}
	var child string
	for _, e := range events {
		if e.Type != messages.TypeToolCallRequested {
			continue
		}
		p, err := e.Decode()
		if r, ok := p.(*messages.ToolCallRequested); err == nil && ok && r.Tool == DelegateTool {
			key, err := messages.ParseEffectKey(r.Key)
			if err != nil {
				t.Fatal(err)
			}
			child = ChildSessionID(key)
		}
	}
	if child == "" {
		t.Fatal("the parent recorded no delegate call")
	}
	last := events[len(events)-1]
	failed, err := messages.NewEnvelope(&messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "the user changed their mind"})
	if err != nil {
		t.Fatal(err)
	}
	failed.ID, failed.SessionID, failed.Seq, failed.CorrelationID, failed.Actor = "boss-failed", "boss", last.Seq+1, last.CorrelationID, last.Actor
	failed.TS = last.TS + 1
	if err := log.Append(context.Background(), []messages.Envelope{failed}); err != nil {
		t.Fatal(err)
	}
	second := &heldModel{release: make(chan struct{})}
	t.Cleanup(func() { close(second.release) })
	n, stop = start(second)
	t.Cleanup(stop)
	var end messages.Envelope
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		events, err := n.log.Read(context.Background(), child, 1)
		if err != nil {
			t.Fatal(err)
		}
		end = events[len(events)-1]
		if end.Type == messages.TypeTaskFailed || end.Type == messages.TypeTaskCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child still runs after its parent's task failed: its last event is %s", end.Type)
		}
	}
	p, err := end.Decode()
	if f, ok := p.(*messages.TaskFailed); err != nil || !ok || f.Reason != messages.ReasonCancelled {
		t.Fatalf("the child's end: %s %s", end.Type, end.Payload)
	}
}
