package node_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// appendGatedLog is a log whose appends wait while gate is held, and which counts its
// reads of session.
type appendGatedLog struct {
	eventlog.Log
	session string
	gate    sync.RWMutex
	reads   atomic.Int64
}

func (l *appendGatedLog) Append(ctx context.Context, events []messages.Envelope) error {
	l.gate.RLock()
	defer l.gate.RUnlock()
	return l.Log.Append(ctx, events)
}

func (l *appendGatedLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	events, err := l.Log.Read(ctx, session, from)
	if session == l.session && ctx.Value(http.ServerContextKey) != nil {
		// A request's, counted once it read: counted as it began, the last reads
		// could still be running as the gate opened and see the first task ended.
		l.reads.Add(1)
	}
	return events, err
}

// Cancel sent many times at once (a client retrying, a user clicking again) while
// a task runs and another waits behind it: every request found the first task
// running (the session is held in the write of the first cancellation until all
// have read it), that task is cancelled once, the rest find it ended (409), and
// the queued task runs to its end.
func TestRepeatedCancelSparesTheQueuedTask(t *testing.T) {
	const session, requests = "cancel-many", 200
	model := &gateModel{release: make(chan struct{})}
	log := &appendGatedLog{Log: sharedLog(t), session: session}
	n := nodetest.Start(t, node.Config{Model: model, Log: log})
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	if _, err := n.Submit(context.Background(), node.Task{Input: "block", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first task's model call", func() bool { return model.calls("block") > 0 })
	if _, err := n.Submit(context.Background(), node.Task{Input: "hold", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	before := log.reads.Load()
	log.gate.Lock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, msg := postJSON(t, api.URL+"/v1/sessions/"+session+"/cancel", "")
			mu.Lock()
			codes[code]++
			mu.Unlock()
			if code != http.StatusAccepted && !strings.Contains(msg, "no running task") {
				t.Errorf("cancel: %d %s", code, msg)
			}
		}()
	}
	waitFor(t, 30*time.Second, "every request read the session", func() bool { return log.reads.Load()-before >= requests })
	log.gate.Unlock()
	wg.Wait()
	close(model.release)
	var events []messages.Envelope
	waitFor(t, 30*time.Second, "both tasks ended", func() bool {
		events, _ = n.Log().Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskCompleted)+countType(events, messages.TypeTaskFailed) == 2
	})
	if countType(events, messages.TypeTaskCompleted) != 1 || codes[http.StatusAccepted] != 1 {
		t.Fatalf("after %d cancels (%v): %s; want the first task cancelled once and the second completed", requests, codes, eventTypes(events))
	}
	if err := n.Cancel(context.Background(), session, ""); !errors.Is(err, actors.ErrNoRunningTask) {
		t.Fatalf("a cancel of the idle session: %v", err)
	}
}
