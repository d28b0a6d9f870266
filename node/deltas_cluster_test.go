package node_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// topicCounter counts the messages a node publishes to one topic (but its
// deltas.owners and deltas.catchup.ask), and the announcements of its watchers of deltas (deltas.watch) it
// lets through gate.
type topicCounter struct {
	message.Publisher
	topic   string
	msgs    atomic.Int64
	watches atomic.Int64
	// gate, when set and true, drops the node's deltas.watch messages; a node's
	// deltas.owners sets it false before it is published.
	gate *atomic.Bool
}

func (p *topicCounter) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		typ := m.Metadata.Get(messages.MetaType)
		if topic == p.topic && typ != messages.TypeDeltaOwners && typ != messages.TypeDeltaCatchUpAsk {
			p.msgs.Add(1)
		}
		switch typ {
		case messages.TypeDeltaOwners:
			if p.gate != nil {
				p.gate.Store(false)
			}
		case messages.TypeDeltaWatch:
			if p.gate != nil && p.gate.Load() {
				return nil // dropped: the bus lost it
			}
			p.watches.Add(1)
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// streamSettle is how long a stream of the test's provider goes on after its last
// token, as a provider's closing chunks (usage, [DONE]) do. The call's last deltas
// and its answer travel on different topics (troupe.deltas, then troupe.replies or
// troupe.events); deltas that reach a watcher after their call's model.responded
// are dropped, so without a pause the tail of a burst may lose that race.
const streamSettle = 150 * time.Millisecond

// settledModel is a streaming model whose streams end after after more, their
// increments pace apart.
type settledModel struct {
	llm.Model
	s     llm.Streamer
	after time.Duration
	pace  time.Duration
}

func (m settledModel) Stream(ctx context.Context, r llm.Request, onDelta func(llm.Delta) error) (llm.Response, error) {
	paced := onDelta
	if m.pace > 0 {
		paced = func(d llm.Delta) error {
			time.Sleep(m.pace)
			return onDelta(d)
		}
	}
	resp, err := m.s.Stream(ctx, r, paced)
	select {
	case <-time.After(m.after):
	case <-ctx.Done():
	}
	return resp, err
}

// deltaCluster is a cluster whose model is a fake streaming provider (streamingNode's):
// a request that does not ask to stream is answered "warm" at once, and the n-th one
// that streams (from 0) gets streams(n).
type deltaCluster struct {
	t     *testing.T
	k     kafkaEnv
	group string
	log   eventlog.Log
	srv   *openaitest.Server
	// a2a, when set, is the A2A configuration of the nodes started next.
	a2a *node.A2AConfig
	// deltasFeed, when set, stands between the nodes started next and the
	// troupe.deltas messages they read (a slow or lossy bus).
	deltasFeed func(ctx context.Context, in <-chan *message.Message) <-chan *message.Message
	// pace, when set, spaces the increments of the model's streams on the nodes
	// started next, whose streams then end at their last token (no streamSettle).
	pace time.Duration
	// watchGate is the gate of every node's topicCounter.
	watchGate atomic.Bool
	// tools are the tools of the nodes started next.
	tools []tools.Tool
	// model, when set, is the model of the nodes started next (else one of the
	// fake provider's, settled or paced).
	model llm.Model
	// streamUnwatched is Config.StreamUnwatched of the nodes started next.
	streamUnwatched bool
}

func newDeltaCluster(t *testing.T, streams func(n int) openaitest.Reply) *deltaCluster {
	t.Helper()
	srv := streamingProvider(t, streams)
	return &deltaCluster{t: t, k: newKafkaEnv(t), group: uniqueGroup(t), log: sharedLog(t), srv: srv}
}

// node starts a node with roles; it counts what it publishes on troupe.deltas. Its
// gateway retries a cut stream up to attempts times.
func (c *deltaCluster) node(name string, roles node.Role, attempts int) (*node.Node, *topicCounter, func()) {
	t := c.t
	t.Helper()
	clients, err := kafka.DialNode(c.k.brokers, c.group, c.k.layout(6), watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := openai.New(openai.Config{Provider: "fake", BaseURL: c.srv.URL, Model: "fake-model", Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pub := &topicCounter{Publisher: clients.Publisher, topic: messages.TopicDeltas, gate: &c.watchGate}
	model := settledModel{Model: m, s: m, after: streamSettle, pace: c.pace}
	if c.pace > 0 {
		model.after = 0
	}
	var live message.Subscriber = clients.Live
	if c.deltasFeed != nil {
		live = deltasFeedSubscriber{Subscriber: live, feed: c.deltasFeed}
	}
	var chosen llm.Model = model
	if c.model != nil {
		chosen = c.model
	}
	n, err := node.New(context.Background(), node.Config{
		Log: c.log, NodeID: name, Roles: roles, A2A: c.a2a, Tools: c.tools, Model: chosen, MaxSteps: 4, StreamUnwatched: c.streamUnwatched,
		Gateway: gateway.Config{Retry: gateway.RetryPolicy{MaxAttempts: attempts, Initial: time.Millisecond, Max: time.Millisecond}},
		Bus: &node.Bus{Publisher: pub, Tasks: clients.Group, Live: live,
			Tools: clients.Tools, Models: clients.Models, Sharded: true, Partition: kafka.PartitionOf},
	})
	if err != nil {
		_ = clients.Close()
		t.Fatal(err)
	}
	clients.SetOwner(n)
	stop, err := n.Start(context.Background())
	if err != nil {
		_ = clients.Close()
		t.Fatal(err)
	}
	var once sync.Once
	closeAll := func() { once.Do(func() { stop(); _ = clients.Close() }) }
	t.Cleanup(closeAll)
	return n, pub, closeAll
}

// warm runs a first task on a session through n (nobody watches its deltas: its model
// call does not stream) and returns the seq of its last event.
func (c *deltaCluster) warm(n *node.Node, session string) uint64 {
	t := c.t
	t.Helper()
	if _, err := n.Submit(context.Background(), node.Task{Input: "warm up", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, n, []string{session}, 60*time.Second)
	events, err := c.log.Read(context.Background(), session, 1)
	if err != nil || len(events) == 0 {
		t.Fatalf("warm-up of %s: %d events, %v", session, len(events), err)
	}
	return events[len(events)-1].Seq
}

// followDeltas reads a WatchDeltas feed until its task ends, as sseEvents, from the
// event after seq after. Earlier events may come first, as the SSE stream skips
// them: a session actor hands a batch to its node's watchers just after the log
// holds it, so a watcher that came once a reader of the log saw the previous task
// end may still get that task's last batch.
func followDeltas(t *testing.T, ctx context.Context, live <-chan messages.Envelope, after uint64) <-chan []sseEvent {
	out := make(chan []sseEvent, 1)
	go func() {
		var got []sseEvent
		defer func() { out <- got }()
		for {
			select {
			case e, ok := <-live:
				if !ok {
					t.Errorf("the owner's watcher was disconnected after %d envelopes", len(got))
					return
				}
				if e.Seq != 0 && e.Seq <= after {
					continue // the previous task's
				}
				got = append(got, sseEvent{name: string(e.Type), env: e})
				if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
					return
				}
			case <-ctx.Done():
				t.Errorf("the owner's watcher: no end of the task: %v", ctx.Err())
				return
			}
		}
	}()
	return out
}

// streamOrder is the kinds of a stream's events, a run of deltas as one "delta".
func streamOrder(got []sseEvent) string {
	var order []string
	for _, e := range got {
		name := e.name
		if name == string(messages.TypeModelDelta) {
			name = "delta"
		}
		if name != "delta" || len(order) == 0 || order[len(order)-1] != "delta" {
			order = append(order, name)
		}
	}
	return strings.Join(order, " ")
}

// checkWholeDeltas checks a stream's deltas: the pieces in order, numbered from 1,
// of the call its model.requested names.
func checkWholeDeltas(t *testing.T, who string, got []sseEvent, pieces []string) {
	t.Helper()
	if want := "task.submitted model.requested delta model.responded task.completed"; streamOrder(got) != want {
		t.Fatalf("%s: stream order %q, want %q", who, streamOrder(got), want)
	}
	deltas := deltasOf(t, got)
	if len(deltas) != len(pieces) {
		t.Fatalf("%s: %d deltas, want %d", who, len(deltas), len(pieces))
	}
	var requested *messages.ModelRequested
	for _, e := range got {
		if e.name == string(messages.TypeModelRequested) {
			p, _ := e.env.Decode()
			requested = p.(*messages.ModelRequested)
		}
	}
	for i, d := range deltas {
		if d.Seq != uint64(i+1) || d.Content != pieces[i] || d.Attempt != 1 || d.Reset || d.Key != requested.Key || d.Step != requested.Step {
			t.Fatalf("%s: delta %d: %+v (call %s step %d)", who, i, d, requested.Key, requested.Step)
		}
	}
}

// In a cluster of an owner of sessions (no models role), a node performing model
// calls and a node serving the API: an SSE client on the API node sees the 100 tokens
// the provider streams to the performer as model.delta events in order, between the
// call's model.requested and its model.responded, which the log holds whole, once,
// beside no delta; so does, on another session, a watcher on the owner. The
// performer publishes them in a few batches, not one message a token.
func TestClusterStreamsDeltasToOtherNodes(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(int) openaitest.Reply {
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	owner, ownerPub, _ := c.node("owner", node.RoleSessions|node.RoleTools, 0)
	_, perfPub, _ := c.node("models", node.RoleModels, 0)
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })
	api := httptest.NewServer(apiNode.Handler())
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Watched on the API node only: the owner hears of the watcher (DeltaWatch).
	// Before, nobody watches: nothing streams, nothing goes on troupe.deltas.
	last := c.warm(apiNode, "cl-api")
	if n := perfPub.msgs.Load(); n != 0 {
		t.Fatalf("the performer published %d messages on %s with nobody watching", n, messages.TopicDeltas)
	}
	for _, r := range c.srv.Requests() {
		if s, _ := r.JSON(t)["stream"].(bool); s {
			t.Fatal("a model call streamed with nobody watching")
		}
	}
	checkWholeDeltas(t, "SSE on the API node", streamTask(t, ctx, api.URL, apiNode, "cl-api", last, "count to 100"), pieces)
	resp := respondedAfter(t, apiNode, "cl-api", last)
	if len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") || resp[0].Error != "" {
		t.Fatalf("recorded answers: %+v", resp)
	}
	if n := perfPub.msgs.Load(); n == 0 || n > 20 {
		t.Errorf("the performer published %d messages on %s for 100 deltas: want a few batches", n, messages.TopicDeltas)
	}

	// Watched on the owner only: its session's calls go to the performer, whose
	// deltas come back over the bus.
	last = c.warm(apiNode, "cl-owner")
	ownerLive, stopOwner := owner.WatchDeltas("cl-owner")
	defer stopOwner()
	ownerGot := followDeltas(t, ctx, ownerLive, last)
	if _, err := apiNode.Submit(ctx, node.Task{Input: "count to 100", SessionID: "cl-owner"}); err != nil {
		t.Fatal(err)
	}
	checkWholeDeltas(t, "a watcher on the owner", <-ownerGot, pieces)
	if resp := respondedAfter(t, apiNode, "cl-owner", last); len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") {
		t.Fatalf("recorded answers: %+v", resp)
	}
	if n := ownerPub.msgs.Load(); n != 0 {
		t.Errorf("the owner, which performs no model call, published %d messages on %s", n, messages.TopicDeltas)
	}
}

// On a remote performer, a stream the connection cuts mid-answer is retried by its
// gateway: an SSE client on the API node sees the cut attempt's deltas, then the
// retry's from a Reset, and the log holds the retry's answer, whole. When every
// attempt is cut the call fails cleanly: its model.responded has the error and no
// text.
func TestClusterStreamCutOnARemotePerformer(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(i int) openaitest.Reply {
		switch {
		case i == 0:
			return cutStream(pieces[:50])
		case i == 1:
			return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
		default: // the second session: cut every time
			return cutStream(pieces[:20])
		}
	})
	owner, _, _ := c.node("owner", node.RoleSessions|node.RoleTools, 0)
	c.node("models", node.RoleModels, 2)
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })
	api := httptest.NewServer(apiNode.Handler())
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	last := c.warm(apiNode, "cl-cut")
	got := streamTask(t, ctx, api.URL, apiNode, "cl-cut", last, "count to 100")
	if end := got[len(got)-1]; end.name != string(messages.TypeTaskCompleted) {
		t.Fatalf("the task ended with %s: %s", end.name, end.env.Payload)
	}
	deltas := deltasOf(t, got)
	if len(deltas) != 150 {
		t.Fatalf("%d deltas, want 50 of the cut attempt and 100 of the retry", len(deltas))
	}
	var shown strings.Builder
	for i, d := range deltas {
		attempt, piece, reset := 1, pieces[i%100], false
		if i >= 50 {
			attempt, piece, reset = 2, pieces[i-50], i == 50
		}
		if d.Seq != uint64(i+1) || d.Attempt != attempt || d.Content != piece || d.Reset != reset {
			t.Fatalf("delta %d: %+v, want attempt %d %q reset %v", i, d, attempt, piece, reset)
		}
		if d.Reset {
			shown.Reset()
		}
		shown.WriteString(d.Content)
	}
	resp := respondedAfter(t, apiNode, "cl-cut", last)
	if len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") || resp[0].Message.Content != shown.String() {
		t.Fatalf("recorded answers: %+v; shown %q", resp, shown.String())
	}

	last = c.warm(apiNode, "cl-fail")
	got = streamTask(t, ctx, api.URL, apiNode, "cl-fail", last, "count")
	if end := got[len(got)-1]; end.name != string(messages.TypeTaskFailed) {
		t.Fatalf("the task ended with %s: %s", end.name, end.env.Payload)
	}
	if d := deltasOf(t, got); len(d) != 40 || !d[20].Reset || d[20].Attempt != 2 {
		t.Errorf("%d deltas (want 20 per attempt, the second reset)", len(d))
	}
	resp = respondedAfter(t, apiNode, "cl-fail", last)
	if len(resp) != 1 || resp[0].Error == "" || resp[0].Message.Content != "" || len(resp[0].Message.ToolCalls) != 0 {
		t.Fatalf("recorded answers: %+v", resp)
	}
}

// A performer that dies mid-answer (its node stops) leaves the call to another
// performer, which streams it again from its start: an SSE client on the API node
// sees the first performer's half answer, then the second's whole, from a delta
// marked Reset (the hub marks it: the call's deltas come from another node), and
// the log holds one whole answer.
func TestClusterPerformerDiesMidAnswer(t *testing.T) {
	pieces := tokens(100)
	c := newDeltaCluster(t, func(i int) openaitest.Reply {
		if i == 0 { // half an answer, then nothing until the performer goes away
			ev := []string{openaitest.RoleChunk()}
			for _, p := range pieces[:50] {
				ev = append(ev, openaitest.ContentChunk(p))
			}
			return openaitest.Reply{Events: ev, Stall: true}
		}
		return openaitest.TextStream(messages.Usage{PromptTokens: 20, CompletionTokens: 100}, pieces...)
	})
	owner, _, _ := c.node("owner", node.RoleSessions|node.RoleTools, 0)
	_, pubA, closeA := c.node("models-a", node.RoleModels, 0)
	_, pubB, closeB := c.node("models-b", node.RoleModels, 0)
	apiNode, _, _ := c.node("api", node.RoleTools, 0)
	waitFor(t, 60*time.Second, "the owner owning every partition", func() bool { return owner.PartitionsOwned() == 6 })
	api := httptest.NewServer(apiNode.Handler())
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	last := c.warm(apiNode, "cl-dies")
	events := openStream(t, ctx, api.URL, "cl-dies", last)
	if _, err := apiNode.Submit(ctx, node.Task{Input: "count to 100", SessionID: "cl-dies"}); err != nil {
		t.Fatal(err)
	}
	var got []sseEvent
	for len(deltasOf(t, got)) < 50 {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended after %d events", len(got))
			}
			got = append(got, e)
		case <-ctx.Done():
			t.Fatalf("%d deltas of the first performer's half answer, want 50", len(deltasOf(t, got)))
		}
	}
	switch {
	case pubA.msgs.Load() > 0 && pubB.msgs.Load() == 0:
		closeA()
	case pubB.msgs.Load() > 0 && pubA.msgs.Load() == 0:
		closeB()
	default:
		t.Fatalf("deltas published by models-a %d times, by models-b %d times: want one performer", pubA.msgs.Load(), pubB.msgs.Load())
	}
	got = append(got, untilDone(t, ctx, events)...)
	if want := "task.submitted model.requested delta model.responded task.completed"; streamOrder(got) != want {
		t.Fatalf("stream order %q, want %q", streamOrder(got), want)
	}
	deltas := deltasOf(t, got)
	if len(deltas) != 150 {
		t.Fatalf("%d deltas, want 50 of the first performer and 100 of the second", len(deltas))
	}
	var shown strings.Builder
	for i, d := range deltas {
		seq, piece, reset := i+1, pieces[i%100], false
		if i >= 50 {
			seq, piece, reset = i-49, pieces[i-50], i == 50
		}
		if d.Seq != uint64(seq) || d.Content != piece || d.Reset != reset {
			t.Fatalf("delta %d: %+v, want seq %d %q reset %v", i, d, seq, piece, reset)
		}
		if d.Reset {
			shown.Reset()
		}
		shown.WriteString(d.Content)
	}
	resp := respondedAfter(t, apiNode, "cl-dies", last)
	if len(resp) != 1 || resp[0].Message.Content != strings.Join(pieces, "") || resp[0].Message.Content != shown.String() {
		t.Fatalf("recorded answers: %+v; shown %q", resp, shown.String())
	}
}
