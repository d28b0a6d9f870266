package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// slowModel answers like its model after a pause, so that tasks queue up.
type slowModel struct {
	llm.Model
	pause time.Duration
}

func (m slowModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	select {
	case <-time.After(m.pause):
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return m.Model.Generate(ctx, r)
}

// taskOutcomes reads a session's log: its task IDs in submission order, the ended
// ones in the order they ended (failing on a task that ended twice), and the keys of
// the tool calls whose results are recorded.
func taskOutcomes(t *testing.T, log eventlog.Log, session string) (submitted, ended []string, recorded map[string]bool) {
	t.Helper()
	events, err := log.Read(context.Background(), session, 1)
	if err != nil {
		t.Fatal(err)
	}
	recorded = map[string]bool{}
	seen := map[string]bool{}
	for i, e := range events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("session %s: seq %d at position %d", session, e.Seq, i+1)
		}
		switch e.Type {
		case messages.TypeTaskSubmitted:
			submitted = append(submitted, e.ID)
		case messages.TypeTaskCompleted, messages.TypeTaskFailed:
			if seen[e.CorrelationID] {
				t.Fatalf("task %s ended twice (again at seq %d)", e.CorrelationID, e.Seq)
			}
			seen[e.CorrelationID] = true
			if e.Type == messages.TypeTaskFailed {
				t.Fatalf("task %s failed at seq %d: %s", e.CorrelationID, e.Seq, e.Payload)
			}
			ended = append(ended, e.CorrelationID)
		case messages.TypeToolCallCompleted:
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			recorded[p.(*messages.ToolCallCompleted).Key] = true
		}
	}
	return submitted, ended, recorded
}

// Many tasks queued on one session, the node stopped mid-run, a new node on the same
// directory: every accepted task runs to completion exactly once, in the order
// submitted, and each side effect happens once; a tool call whose result was
// recorded before the stop is not made again.
func TestQueuedTasksSurviveANodeStop(t *testing.T) {
	log := sharedLog(t) // both nodes write to it, as nodes on one data directory do
	led := newLedger(log, 5*time.Millisecond)
	calls := &modelCalls{by: map[string]int{}}
	cfg := func(name string) node.Config {
		return node.Config{Log: log, Tools: []tools.Tool{led.tool(name)},
			Model: slowModel{Model: calls.model(t, log, name), pause: 20 * time.Millisecond}}
	}
	const tasks, session = 30, "hot7"

	first, stopFirst := nodetest.StartWithStop(t, cfg("first"))
	var wg sync.WaitGroup
	errs := make(chan error, tasks)
	for i := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := first.Submit(context.Background(), node.Task{Input: fmt.Sprintf("t%d", i), SessionID: session}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a task was not accepted: %v", err)
	}
	// Stop once some tasks ended and most still wait.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, ended, _ := taskOutcomes(t, first.Log(), session)
		if len(ended) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no three tasks ended within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopFirst()

	submitted, ended, recordedAtStop := taskOutcomes(t, first.Log(), session)
	if len(submitted) != tasks {
		t.Fatalf("%d tasks recorded, %d accepted", len(submitted), tasks)
	}
	if len(ended) == tasks {
		t.Fatal("every task ended before the stop; the test proves nothing")
	}
	t.Logf("stopped with %d of %d tasks ended", len(ended), tasks)

	second, stopSecond := nodetest.StartWithStop(t, cfg("second"))
	defer stopSecond()
	deadline = time.Now().Add(60 * time.Second)
	for {
		_, ended, _ = taskOutcomes(t, second.Log(), session)
		if len(ended) == tasks {
			break
		}
		if time.Now().After(deadline) {
			infos, _ := second.Log().Sessions(context.Background(), eventlog.Filter{})
			t.Fatalf("after the restart only %d of %d accepted tasks ended; sessions: %+v", len(ended), tasks, infos)
		}
		time.Sleep(10 * time.Millisecond)
	}
	submitted, ended, _ = taskOutcomes(t, second.Log(), session)
	for i := range submitted {
		if ended[i] != submitted[i] {
			t.Fatalf("task %d to end was %s, want %s (submission order)", i+1, ended[i], submitted[i])
		}
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	if len(led.effects) != tasks {
		t.Errorf("%d side effects for %d tasks", len(led.effects), tasks)
	}
	for key := range recordedAtStop {
		if led.calls[key] != 1 {
			t.Errorf("tool call %s had its result recorded before the stop but ran %d times", key, led.calls[key])
		}
	}
	calls.mu.Lock()
	defer calls.mu.Unlock()
	if len(led.violations) > 0 || len(calls.violations) > 0 {
		t.Errorf("recorded effects repeated: %v %v", led.violations, calls.violations)
	}
	st, ok, err := second.Status(context.Background(), session)
	if err != nil || !ok || st.Status != messages.StatusCompleted || st.Output != "paid" {
		t.Fatalf("status after the restart: %+v %v %v", st, ok, err)
	}
}
