package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// sizedModel answers a short task with a text of answerSize bytes, and a long one
// (an input of more than 64 KiB) with the size of what it read; it counts its calls
// by key.
type sizedModel struct {
	answerSize int
	mu         *sync.Mutex
	calls      map[string]int
}

func (m sizedModel) Name() string { return "sized" }

func (m sizedModel) Generate(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.calls[req.Key]++
	m.mu.Unlock()
	in := req.Messages[len(req.Messages)-1].Content
	out := bigAnswer(m.answerSize)
	if len(in) > 64<<10 {
		out = fmt.Sprintf("read %d bytes", len(in))
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: out}}, nil
}

// bigAnswer is a text of n bytes with multi-byte runes and characters JSON escapes.
func bigAnswer(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString("ünïcode <tag> & \"quotes\" ")
	}
	return b.String()[:n]
}

// TestClusterMessagesLargerThanABusMessage runs, on a node whose model calls a
// models node makes, tasks whose messages are larger than a Kafka message (1 MiB):
// a 2 MiB answer; a request of 600 KB of input after a first task's 600 KB; a task
// of 300 KB of '<', which JSON encodes into 1.8 MB. Before, the models node's reply
// was refused by the broker on every retry while the session waited on its call
// forever, the request failed the task, and the task was refused to its client
// (and events and results of such sizes never reached the bus). Now each travels
// as a reference naming the log stream that holds it: every task completes with its
// whole answer, each call made once; troupe.results carries a large result cut to
// fit, marked truncated; and a watcher on another node (which reads troupe.events)
// gets the 2 MiB model.responded whole, from the log.
func TestClusterMessagesLargerThanABusMessage(t *testing.T) {
	c := newTestCluster(t, 0)
	const answerSize = 2 << 20
	var mu sync.Mutex
	calls := map[string]int{}
	model := sizedModel{answerSize: answerSize, mu: &mu, calls: calls}
	// A model with a window of a million tokens: the long input is sent whole.
	wide := func(cfg *node.Config) { cfg.Context.Window = 1_000_000 }
	agents, _ := clusterNode(t, c.k, c.group, c.log, "agents", node.RoleSessions, []tools.Tool{c.led.tool("agents")}, model, wide)
	workers, _ := clusterNode(t, c.k, c.group, c.log, "workers", node.RoleTools|node.RoleModels, []tools.Tool{c.led.tool("workers")}, model, wide)

	layout := c.k.layout(6)
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: c.k.brokers, InitialOffset: kafka.FromLatest, Topics: layout}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	results, err := sub.Subscribe(ctx, messages.TopicResults)
	if err != nil {
		t.Fatal(err)
	}

	base := fmt.Sprintf("large-%d-", time.Now().UnixNano())
	bigOut, bigIn, bigTask := base+"answer", base+"input", base+"task"
	watch, stop := workers.Watch(bigOut) // not run there: read from troupe.events
	defer stop()
	// Each task fits a Kafka message (1 MiB); the second's model request, with the
	// first task's conversation, does not.
	input := strings.Repeat("a long input line without characters to escape. ", 600_000/49)
	// A task whose input (300 KB) is encoded into 1.8 MB: each '<' is \u003c.
	marked := strings.Repeat("<", 300_000)
	for _, task := range []node.Task{{Input: "answer at length", SessionID: bigOut}, {Input: input, SessionID: bigIn}, {Input: input, SessionID: bigIn},
		{Input: marked, SessionID: bigTask}} {
		if _, err := agents.Submit(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	waitCompleted(t, agents, []string{bigOut, bigIn, bigTask}, 60*time.Second)

	want := bigAnswer(answerSize)
	for id, output := range map[string]string{bigOut: want, bigIn: fmt.Sprintf("read %d bytes", len(input)), bigTask: fmt.Sprintf("read %d bytes", len(marked))} {
		st, _, err := agents.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Output != output {
			t.Errorf("session %s: output of %d bytes, want %d", id, len(st.Output), len(output))
		}
	}
	mu.Lock()
	for key, n := range calls {
		if n != 1 {
			t.Errorf("model call %s made %d times", key, n)
		}
	}
	if len(calls) != 4 {
		t.Errorf("%d model calls, want 4", len(calls))
	}
	mu.Unlock()

	// The stored commands are streams of the log, but no sessions.
	for _, stream := range []string{
		messages.EffectStream(messages.BusStoredReply, messages.EffectKey{SessionID: bigOut, Seq: 2}),
		messages.EffectStream(messages.BusStoredRequest, messages.EffectKey{SessionID: bigIn, Seq: 6}),
		messages.EffectStream(messages.BusStoredRequest, messages.EffectKey{SessionID: bigTask, Seq: 2}),
	} {
		events, err := c.log.Read(ctx, stream, 1)
		if err != nil || len(events) != 1 || events[0].Type != messages.TypeBusStored {
			t.Errorf("stream %s: %d events (err %v), want its one %s", stream, len(events), err, messages.TypeBusStored)
		}
		if eventlog.IsSession(stream) {
			t.Errorf("%s counts as a session", stream)
		}
	}

	// troupe.results: the large answer cut to fit one message, and said so.
	for got := map[string]int{}; got[bigOut]+got[bigIn]+got[bigTask] < 4; {
		select {
		case m := <-results:
			m.Ack()
			var r messages.TaskResult
			if err := json.Unmarshal(m.Payload, &r); err != nil {
				t.Fatal(err)
			}
			if r.SessionID != bigOut && r.SessionID != bigIn && r.SessionID != bigTask {
				continue
			}
			got[r.SessionID]++
			if len(m.Payload) > messages.BusMessageMax || r.Truncated != (r.SessionID == bigOut) || r.SessionID == bigOut && !strings.HasPrefix(want, r.Output) {
				t.Errorf("result of %s: %d bytes, truncated %v, output of %d bytes", r.SessionID, len(m.Payload), r.Truncated, len(r.Output))
			}
		case <-ctx.Done():
			t.Fatal("the results did not come on troupe.results")
		}
	}

	// The watcher on the other node got every event, the large one whole.
	var seqs []uint64
	for done := false; !done; {
		var e messages.Envelope
		select {
		case e = <-watch:
		case <-ctx.Done():
			t.Fatalf("the remote watcher got seqs %v and no more", seqs)
		}
		seqs = append(seqs, e.Seq)
		if e.Type == messages.TypeModelResponded {
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if got := p.(*messages.ModelResponded).Message.Content; got != want {
				t.Errorf("the remote watcher's model.responded holds %d bytes, want %d", len(got), len(want))
			}
		}
		done = e.Type == messages.TypeTaskCompleted
	}
	if fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Errorf("the remote watcher got seqs %v, want [1 2 3 4]", seqs)
	}
}
