package node_test

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
)

// panickingOn is a log whose Append panics, as a bug in a session's step would,
// on every batch that records a tool's result for one of the doomed tasks: the
// session's actor fails at each try of that task, and at nothing else.
type panickingOn struct {
	eventlog.Log
	doomed map[string]bool
	panics atomic.Int64
}

func (l *panickingOn) Append(ctx context.Context, events []messages.Envelope) error {
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted && l.doomed[e.CorrelationID] {
			l.panics.Add(1)
			panic("a bug in the step, token sk-given-up-0123456789abcdef0123")
		}
	}
	return l.Log.Append(ctx, events)
}

// A session whose actor fails at every try of a task is given up on by its
// supervisor (five restarts in ten seconds): the task fails then, once, with
// session_failed and the last failure (redacted), its waiter is answered with
// that, and the session's status says failed. The task queued behind it runs
// after it, as after any task's end, and so does a task sent afterwards. Before,
// the task sat running, its waiter answered by nothing, until another message
// for the session started it again.
func TestATaskItsSessionWasGivenUpOnFails(t *testing.T) {
	givenUpOn(t, func(cfg node.Config) *node.Node { return nodetest.Start(t, cfg) })
}

// On Kafka too: the session host of the node that owns the session starts it
// again to end the task, and the task's result reaches its waiter as any other's.
func TestATaskItsSessionWasGivenUpOnFailsOnKafka(t *testing.T) {
	k := newKafkaEnv(t)
	givenUpOn(t, func(cfg node.Config) *node.Node { return k.nodeWith(t, cfg) })
}

func givenUpOn(t *testing.T, start func(node.Config) *node.Node) {
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	log := &panickingOn{Log: l, doomed: map[string]bool{"alone-1": true, "queued-1": true}}
	// The tool holds each call until the queued task is recorded behind the
	// doomed one; afterwards it answers at once.
	open := make(chan struct{})
	var opened sync.Once
	t.Cleanup(func() { opened.Do(func() { close(open) }) })
	gate := tools.MustFunc("gate", "Waits for its turn.", func(ctx context.Context, _ noArgs) (string, error) {
		select {
		case <-open:
			return "passed", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "gate", Arguments: "{}"}}},
		{Content: "done"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{Log: log, Model: script, Tools: []tools.Tool{gate}, Secrets: []string{"sk-given-up-0123456789abcdef0123"}}
	n := start(cfg)
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)

	// Two waiting clients (run_task's path): one whose task is alone on its
	// session, one with a task queued behind it.
	type answer struct {
		res messages.TaskResult
		err error
	}
	run := func(id, session string) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := n.RunTask(ctx, node.Task{ID: id, SessionID: session, Input: "pass the gate"})
			out <- answer{res, err}
		}()
		return out
	}
	alone, doomed := run("alone-1", "given-up-alone"), run("queued-1", "given-up-queued")
	waitFor(t, 30*time.Second, "both tasks to call their tool", func() bool {
		for _, s := range []string{"given-up-alone", "given-up-queued"} {
			events, err := l.Read(context.Background(), s, 1)
			if err != nil || len(events) == 0 || events[len(events)-1].Type != messages.TypeToolCallRequested {
				return false
			}
		}
		return true
	})
	// Recorded behind the doomed task (submitted again, by its ID, if it met the
	// session's actor as it was stopped).
	waitFor(t, 30*time.Second, "the second task to be recorded", func() bool {
		_, err := n.Submit(context.Background(), node.Task{ID: "queued-2", SessionID: "given-up-queued", Input: "pass the gate again"})
		if err != nil {
			return false
		}
		events, err := l.Read(context.Background(), "given-up-queued", 1)
		return err == nil && slices.ContainsFunc(events, func(e messages.Envelope) bool { return e.ID == "queued-2" })
	})
	opened.Do(func() { close(open) })

	for name, c := range map[string]<-chan answer{"alone": alone, "queued": doomed} {
		select {
		case a := <-c:
			switch {
			case a.err != nil:
				t.Errorf("%s: the waiting client was answered %v; want the task's failure", name, a.err)
			case a.res.Status != messages.StatusFailed || a.res.Reason != messages.ReasonSessionFailed:
				t.Errorf("%s: the waiting client was answered %+v; want failed, %s", name, a.res, messages.ReasonSessionFailed)
			case !strings.Contains(a.res.Error, "a bug in the step") || strings.Contains(a.res.Error, "sk-given-up"):
				t.Errorf("%s: the task's error %q does not quote its last failure, redacted", name, a.res.Error)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the waiting client got no answer", name)
		}
	}
	if p := log.panics.Load(); p < 6 {
		t.Errorf("the sessions' actors failed %d times; want at least 6 (five restarts, then the supervisor gave up)", p)
	}

	var view struct{ Status, Reason, Error string }
	if code := getJSON(t, api.URL+"/v1/sessions/given-up-alone", &view); code != 200 || view.Status != messages.StatusFailed || view.Reason != messages.ReasonSessionFailed {
		t.Errorf("GET /v1/sessions/given-up-alone: %d %+v; want failed, %s", code, view, messages.ReasonSessionFailed)
	}

	// The queued task runs after the failed one; a task sent afterwards runs too.
	waitFor(t, 30*time.Second, "the queued task to end", func() bool {
		r, known, err := n.TaskResult(context.Background(), "given-up-queued", "queued-2")
		return err == nil && known && r.Status != messages.StatusRunning
	})
	if r, _, _ := n.TaskResult(context.Background(), "given-up-queued", "queued-2"); r.Status != messages.StatusCompleted {
		t.Errorf("the task queued behind the failed one: %+v; want completed", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []string{"given-up-alone", "given-up-queued"} {
		res, err := n.RunTask(ctx, node.Task{SessionID: s, Input: "once more"})
		if err != nil || res.Status != messages.StatusCompleted {
			t.Errorf("%s: a task sent afterwards: %+v %v; want completed", s, res, err)
		}
	}

	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"given-up-alone", "given-up-queued"} {
		events, err := l.Read(context.Background(), s, 1)
		if err != nil {
			t.Fatal(err)
		}
		ends := map[string]int{}
		for _, e := range events {
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				ends[e.CorrelationID]++
			}
		}
		for task, k := range ends {
			if k != 1 {
				t.Errorf("%s: task %s ended %d times; want once", s, task, k)
			}
		}
		if len(ends) != map[string]int{"given-up-alone": 2, "given-up-queued": 3}[s] {
			t.Errorf("%s: the tasks that ended: %v", s, ends)
		}
		if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
			t.Errorf("verify %s: %v %v", s, div, err)
		}
	}
}
