package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// stuckDistiller holds the consolidator's calls until released, whatever their
// context says (a provider's call that does not end when its request is
// cancelled), and passes the sessions' calls on to session, counting them.
type stuckDistiller struct {
	session  llm.Model
	calls    atomic.Int32 // the sessions'
	called   chan struct{}
	release  chan struct{}
	once     sync.Once
	released sync.Once
}

func (m *stuckDistiller) Name() string { return "stuck" }

func (m *stuckDistiller) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	for _, msg := range req.Messages {
		if strings.Contains(msg.Content, "kettle") && len(req.Tools) == 0 {
			m.once.Do(func() { close(m.called) })
			<-m.release
			return llm.Response{}, ctx.Err()
		}
	}
	m.calls.Add(1)
	return m.session.Generate(ctx, req)
}

// A consolidation run for a command, stuck in a model call that ignores its
// context, does not hold up the drain of the sessions of a node that stops: they
// issue no new effect once Close began, and the call they have in flight gets the
// grace to answer. Before, Close waited for the run first, up to StopTimeout: the
// sessions went on meanwhile as if nothing stopped (here the next model call of the
// task, performed once more by the session's next owner), and were then stopped
// with no grace left.
func TestMemoryClusterStuckConsolidationDoesNotHoldTheDrain(t *testing.T) {
	model := &stuckDistiller{session: payScript(t), called: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { model.released.Do(func() { close(model.release) }) })
	pay := newBlockingPay()
	t.Cleanup(func() {
		select {
		case <-pay.release:
		default:
			close(pay.release)
		}
	})
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, group, shared, "a")
	b := startMemoryClusterNode(t, k, group, shared, "b", func(cfg *node.Config) {
		cfg.Model = model
		cfg.Tools = []tools.Tool{pay.tool(t)}
		cfg.StopTimeout = 6 * time.Second
		cfg.HandoffGrace = time.Minute
	})
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")
	a.mustPost(t, `[{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this morning"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this evening"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this afternoon"}]`)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		_, _ = a.n.Consolidate(ctx, ns, "cli/stuck")
	}()
	select {
	case <-model.called:
	case <-time.After(60 * time.Second):
		t.Fatal("the owner's consolidation never asked the model")
	}
	session := ""
	for i := range 1000 {
		if id := fmt.Sprintf("drain-%d", i); b.parts.owns(kafka.PartitionOf(id, memoryClusterPartitions)) {
			session = id
			break
		}
	}
	if _, err := b.n.Submit(context.Background(), node.Task{Input: "pay 7", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pay.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool was never called")
	}
	before := model.calls.Load()
	stopped := make(chan struct{})
	go func() { b.stop(); close(stopped) }()
	// The call answers while the node stops, well within its grace.
	time.Sleep(500 * time.Millisecond)
	close(pay.release)
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop")
	}
	if after := model.calls.Load(); after != before {
		t.Errorf("the stopping node's session made %d model calls after Close began, want none (it drains)", after-before)
	}
	if got := recordedToolResults(readAll(t, shared, session)); got != 1 {
		t.Errorf("the log records %d results of the call in flight as the node stopped, want 1", got)
	}
}

// fencedAppends refuses the next appends to one stream as fenced (eventlog.ErrFenced),
// as a node's routed log does while its lease of the stream's partition is being
// taken, or once a newer owner took it.
type fencedAppends struct {
	eventlog.Log
	mu     sync.Mutex
	stream string
	left   int
}

// fence refuses the next times appends to stream.
func (l *fencedAppends) fence(stream string, times int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stream, l.left = stream, times
}

// refusing is how many appends are still to be refused.
func (l *fencedAppends) refusing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.left
}

func (l *fencedAppends) Append(ctx context.Context, events []messages.Envelope) error {
	l.mu.Lock()
	refuse := len(events) > 0 && events[0].SessionID == l.stream && l.left > 0
	if refuse {
		l.left--
	}
	l.mu.Unlock()
	if refuse {
		return fmt.Errorf("append to %s: %w", events[0].SessionID, eventlog.ErrFenced)
	}
	return l.Log.Append(ctx, events)
}

// resends counts the consolidate commands a node publishes on troupe.tasks.
type resends struct {
	message.Publisher
	n atomic.Int32
}

func (p *resends) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if topic == messages.TopicTasks && m.Metadata.Get(messages.MetaType) == messages.TypeMemoryCommand &&
			strings.Contains(string(m.Payload), `"consolidate"`) {
			p.n.Add(1)
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// A consolidation run for a command whose write is fenced while the node still owns
// the stream's partition (its lease being taken) runs again on this node after a
// pause, and answers its caller once it ran. Before, the run sent its command on
// to troupe.tasks each time, for the partition's owner: itself, which read it back
// at once and ran it again, a loop as fast as the broker, one record a turn.
func TestMemoryClusterConsolidateFencedOnItsOwnerIsNotSentToItself(t *testing.T) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	var fenced *fencedAppends
	var sent *resends
	a := startMemoryClusterNode(t, k, group, shared, "a")
	b := startMemoryClusterNode(t, k, group, shared, "b", func(cfg *node.Config) {
		fenced = &fencedAppends{Log: cfg.Log}
		cfg.Log = fenced
		sent = &resends{Publisher: cfg.Bus.Publisher}
		cfg.Bus.Publisher = sent
	})
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")
	a.mustPost(t, `[{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this morning"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this evening"},
		{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this afternoon"}]`)
	fenced.fence(memory.Stream(ns), 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := a.n.Consolidate(ctx, ns, "cli/fenced")
	if err != nil {
		t.Fatalf("the consolidation, fenced three times on its owner: %v", err)
	}
	if rep.Namespace != ns {
		t.Errorf("the report: %+v", rep)
	}
	if left := fenced.refusing(); left > 0 {
		t.Fatalf("the run was fenced %d times, want 3 (it never wrote?)", 3-left)
	}
	if got := sent.n.Load(); got != 0 {
		t.Errorf("the owner sent the consolidate command on to troupe.tasks %d times, its own partition, want none", got)
	}
}

// inFlightGate holds every call until released, counting those it holds at once.
type inFlightGate struct {
	mu           sync.Mutex
	now, most    int
	called       chan struct{}
	release      chan struct{}
	once, closed sync.Once
}

func (m *inFlightGate) Name() string { return "gate" }

func (m *inFlightGate) Generate(ctx context.Context, _ llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.now++
	m.most = max(m.most, m.now)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.now--
		m.mu.Unlock()
	}()
	m.once.Do(func() { close(m.called) })
	select {
	case <-m.release:
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return llm.Response{Message: messages.ChatMessage{Role: "assistant", Content: "NONE"}}, nil
}

func (m *inFlightGate) mostAtOnce() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.most
}

// The consolidations an owner runs for commands, beside its tasks handler, are
// bounded: past the bound a command waits for a run to end, and is run then.
// Before, every command started its run at once, as many runs (goroutines,
// namespaces held in memory, model calls) as commands came.
func TestMemoryClusterConsolidationsAsideAreBounded(t *testing.T) {
	gate := &inFlightGate{called: make(chan struct{}), release: make(chan struct{})}
	release := func() { gate.closed.Do(func() { close(gate.release) }) }
	t.Cleanup(release)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, group, shared, "a")
	b := startMemoryClusterNode(t, k, group, shared, "b", func(cfg *node.Config) { cfg.Model = gate })
	b.n.LimitConsolidationsAside(1)
	waitPartitionsSplit(t, a.n, b.n)
	var namespaces []string
	for i := 0; len(namespaces) < 3 && i < 1000; i++ {
		if ns := fmt.Sprintf("user:bound%d", i); b.parts.owns(kafka.PartitionOf(memory.Stream(ns), memoryClusterPartitions)) {
			namespaces = append(namespaces, ns)
		}
	}
	errs := make(chan error, len(namespaces))
	for _, ns := range namespaces {
		a.mustPost(t, `[{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this morning"},
			{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this evening"},
			{"namespace":"`+ns+`","tier":"episodic","content":"the blue kettle in the kitchen whistled loudly this afternoon"}]`)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			_, err := a.n.Consolidate(ctx, ns, "cli/bound")
			errs <- err
		}()
	}
	select {
	case <-gate.called:
	case <-time.After(60 * time.Second):
		t.Fatal("the owner's consolidations never asked the model")
	}
	// The other commands reach the owner meanwhile; past the bound they wait.
	time.Sleep(2 * time.Second)
	if most := gate.mostAtOnce(); most != 1 {
		t.Errorf("%d consolidations asked the model at once, want 1 (the bound)", most)
	}
	release()
	for range namespaces {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("a consolidation past the bound: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a consolidation past the bound was never answered")
		}
	}
}
