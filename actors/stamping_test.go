package actors_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// bracketLog records the Stamping and Handed calls of a session's steps, and the
// Publish calls between them.
type bracketLog struct {
	mu    sync.Mutex
	calls []string
}

func (b *bracketLog) add(s string) {
	b.mu.Lock()
	b.calls = append(b.calls, s)
	b.mu.Unlock()
}

func (b *bracketLog) Publish(topic string, _ ...*message.Message) error {
	b.add("publish " + topic)
	return nil
}

func (b *bracketLog) Close() error { return nil }

func (b *bracketLog) list() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

// Each step a session appends is bracketed: Stamping before its events are
// stamped, Handed once Publisher has its batch. A step whose append fails calls
// no Handed (the node counts the batch as unpublished: its publication marks),
// but one the log refused as fenced does: the session stops, and the partition's
// new owner publishes what it holds.
func TestStepsAreBracketedForPublicationMarks(t *testing.T) {
	deps := func(b *bracketLog) func(*actors.SessionDeps) {
		return func(d *actors.SessionDeps) {
			d.Publisher = b
			d.Stamping = func(id string, earliest int64) {
				if earliest == math.MaxInt64 {
					b.add("stamping " + id)
				} else {
					b.add("stamping " + id + " with events")
				}
			}
			d.Handed = func(id string) { b.add("handed " + id) }
		}
	}
	t.Run("appended", func(t *testing.T) {
		b := &bracketLog{}
		h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "done"}), deps: deps(b)})
		h.submit("s", "t", "go")
		h.wait("s")
		// The task and the model's request; the model's answer and the task's end.
		want := []string{"stamping s with events", "publish " + messages.TopicEvents, "handed s",
			"stamping s with events", "publish " + messages.TopicEvents, "publish " + messages.TopicResults, "handed s"}
		// The session's end is read from its state, which the last step's events
		// reach before its publication does (under the race detector, visibly):
		// wait for the calls of that step to be made, then compare them all.
		for deadline := time.Now().Add(10 * time.Second); len(b.list()) < len(want) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if got := b.list(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("calls %q; want %q", got, want)
		}
	})
	t.Run("fenced", func(t *testing.T) {
		b := &bracketLog{}
		h := newHarness(t, harnessOpts{model: script(t, llm.ScriptStep{Content: "done"}), deps: deps(b),
			store: func(l *sqlite.Log) actors.EventStore {
				return &flakyStore{EventStore: l, failAt: 1, err: fmt.Errorf("wrapped: %w", eventlog.ErrFenced)}
			}})
		e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "go"})
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Actor = "t", "s", "test"
		if _, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result(); err != nil {
			t.Fatal(err)
		}
		h.waitStopped()
		// The session's load (a step with nothing to append), then the task's.
		if got, want := b.list(), []string{"stamping s", "handed s", "stamping s with events", "handed s"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("calls %q; want %q", got, want)
		}
	})
}
