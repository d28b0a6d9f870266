package node_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// blockingPay is a tool with a side effect that counts its performances by
// idempotency key and, while hold is set, blocks each call until release is
// closed, whatever its context says (a call that cannot be taken back once
// started): then it performs.
type blockingPay struct {
	mu        sync.Mutex
	performed map[string]int
	hold      bool
	entered   chan struct{} // gets one value per call that blocks
	release   chan struct{}
}

func newBlockingPay() *blockingPay {
	return &blockingPay{performed: map[string]int{}, hold: true, entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *blockingPay) tool(t *testing.T) tools.Tool {
	t.Helper()
	type args struct {
		Amount int `json:"amount"`
	}
	tool, err := tools.Func("pay", "Pays an amount.", func(ctx context.Context, a args) (string, error) {
		h.mu.Lock()
		hold := h.hold
		h.mu.Unlock()
		if hold {
			h.entered <- struct{}{}
			<-h.release
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.performed[tools.CallKey(ctx)]++
		return "paid", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// holding sets whether calls block from now on.
func (h *blockingPay) holding(b bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold = b
}

func (h *blockingPay) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.performed {
		out[k] = v
	}
	return out
}

// payScript asks for one payment, then answers.
func payScript(t *testing.T) llm.Model {
	t.Helper()
	m, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "pay", Arguments: `{"amount":7}`}}},
		{Content: "paid 7"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// openLog opens the embedded SQLite log in a new directory, for nodes started on
// it one after the other (the test reads it once a node closed).
func openLog(t *testing.T) eventlog.Log {
	t.Helper()
	l, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// startPayNode starts an embedded node on log whose agent has the pay tool.
func startPayNode(t *testing.T, log eventlog.Log, tool tools.Tool, cfg node.Config) *node.Node {
	t.Helper()
	cfg.Log, cfg.DataDir, cfg.Model, cfg.Tools = log, t.TempDir(), payScript(t), []tools.Tool{tool}
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		_ = n.Close()
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return n
}

// recordedToolResults returns the results of the session's tool calls its log records.
func recordedToolResults(events []messages.Envelope) int {
	n := 0
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			n++
		}
	}
	return n
}

// A tool call in flight when the node closes (a SIGTERM, a rolling restart) is
// let finish: the session issues nothing more, its call's answer is recorded, and
// only then is it stopped. A node started again on the same log resumes the task
// from that answer and does not perform the call again. Before, Close stopped the
// session at once: the tool's answer came to nobody, and the restarted node
// performed the call a second time with the same key (a second payment, for a
// tool that does not dedupe by key).
func TestCloseLetsCallsInFlightAnswer(t *testing.T) {
	log := openLog(t)
	pay := newBlockingPay()
	n := startPayNode(t, log, pay.tool(t), node.Config{HandoffGrace: time.Minute, StopTimeout: 2 * time.Minute})
	if _, err := n.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: "drain"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pay.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was never called")
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	// The call answers while the node closes, well within the grace; a Close
	// that does not wait for it has returned by then, most likely.
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(pay.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return once the call answered")
	}
	events := readAll(t, log, "drain")
	if recordedToolResults(events) != 1 {
		t.Errorf("the log of the closed node records %d tool results, want the one that answered while it closed", recordedToolResults(events))
	}

	pay.holding(false)
	again := startPayNode(t, log, pay.tool(t), node.Config{})
	events = waitEnded(t, again, "drain")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s: %s", last.Type, last.Payload)
	}
	counts := pay.counts()
	if len(counts) != 1 {
		t.Fatalf("payments by key: %v, want one key", counts)
	}
	for key, times := range counts {
		if times != 1 {
			t.Errorf("the call %s was performed %d times, want once", key, times)
		}
	}
}

// failingOnce is a log whose next Append fails once when armed, as a ClickHouse
// hiccup or a SQLite I/O error fails one write.
type failingOnce struct {
	*sqlite.Log
	armed  atomic.Bool
	failed atomic.Int32
}

func (l *failingOnce) Append(ctx context.Context, events []messages.Envelope) error {
	if l.armed.CompareAndSwap(true, false) {
		l.failed.Add(1)
		return errors.New("transient: connection reset by peer")
	}
	return l.Log.Append(ctx, events)
}

// A write that fails once while Close drains is retried, as it is at any other
// time: the answer of the call in flight is recorded, and the node started again
// performs nothing a second time. Before, Close ended the sessions' retries as it
// began, so the failed write restarted the session, which dropped the late answer,
// and the call was performed again with its key.
func TestCloseRetriesAWriteThatFailsWhileItDrains(t *testing.T) {
	log := &failingOnce{Log: openLog(t).(*sqlite.Log)}
	pay := newBlockingPay()
	n := startPayNode(t, log, pay.tool(t), node.Config{HandoffGrace: time.Minute, StopTimeout: 2 * time.Minute})
	if _, err := n.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: "drain"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pay.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was never called")
	}
	log.armed.Store(true) // the write of the call's answer fails once
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(pay.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return once the call answered")
	}
	if log.failed.Load() != 1 {
		t.Fatalf("%d appends failed, want the one armed", log.failed.Load())
	}
	if got := recordedToolResults(readAll(t, log, "drain")); got != 1 {
		t.Errorf("the log of the closed node records %d tool results, want the one that answered while it closed", got)
	}
	pay.holding(false)
	again := startPayNode(t, log, pay.tool(t), node.Config{})
	events := waitEnded(t, again, "drain")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s: %s", last.Type, last.Payload)
	}
	for key, times := range pay.counts() {
		if times != 1 {
			t.Errorf("the call %s was performed %d times, want once", key, times)
		}
	}
}

// A tool call that does not answer within the grace when the node closes is
// given up: Close returns, the call's context is cancelled, nothing is recorded
// of it, and the node started again issues it once more with its key.
func TestCloseGivesAHungCallUpAtTheGrace(t *testing.T) {
	log := openLog(t)
	pay := newBlockingPay()
	t.Cleanup(func() { close(pay.release) }) // the hung call returns only as the test ends
	n := startPayNode(t, log, pay.tool(t), node.Config{HandoffGrace: 200 * time.Millisecond})
	if _, err := n.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: "hung"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pay.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was never called")
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for a call that never answers")
	}
	if got := recordedToolResults(readAll(t, log, "hung")); got != 0 {
		t.Fatalf("the log records %d tool results of a call that never answered", got)
	}
	if c := pay.counts(); len(c) != 0 {
		t.Fatalf("performed %v; the hung call has not returned", c)
	}

	pay.holding(false)
	again := startPayNode(t, log, pay.tool(t), node.Config{})
	events := waitEnded(t, again, "hung")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s: %s", last.Type, last.Payload)
	}
	counts := pay.counts()
	if len(counts) != 1 {
		t.Fatalf("payments by key: %v, want one key", counts)
	}
	for key, times := range counts {
		if times != 1 {
			t.Errorf("the call %s was performed %d times after the restart, want once", key, times)
		}
	}
}
