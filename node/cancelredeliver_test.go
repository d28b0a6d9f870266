package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// gateModel holds a call whose task input is "block" until its context ends, and
// one whose input is "hold" until release is closed; it answers the others at once.
type gateModel struct {
	release chan struct{}
	mu      sync.Mutex
	inputs  []string
}

func (m *gateModel) Name() string { return "gate" }

func (m *gateModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	in := ""
	for _, msg := range r.Messages {
		if msg.Role == messages.RoleUser {
			in = msg.Content
		}
	}
	m.mu.Lock()
	m.inputs = append(m.inputs, in)
	m.mu.Unlock()
	switch in {
	case "block":
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	case "hold":
		select {
		case <-m.release:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "ok " + in}}, nil
}

// calls counts the calls made for tasks whose input is in.
func (m *gateModel) calls(in string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.inputs {
		if s == in {
			n++
		}
	}
	return n
}

// A cancellation read again from troupe.tasks (its owner went down before it
// committed the offset, and the next owner reads it again) cancels the task it
// was sent for, once: not the task queued behind it, which runs then.
func TestRedeliveredCancelSparesTheNextTask(t *testing.T) {
	k, log, group := newKafkaEnv(t), sharedLog(t), uniqueGroup(t)
	model := &gateModel{release: make(chan struct{})}
	grace := func(c *node.Config) { c.HandoffGrace = heldCallGrace }
	rec := &cancelRecorder{}
	a, stopA := clusterNode(t, k, group, log, "a", 0, nil, model, grace, func(c *node.Config) {
		rec.Publisher = c.Bus.Publisher
		c.Bus.Publisher = rec
	})
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	session := fmt.Sprintf("cancel-again-%d", time.Now().UnixNano())
	if _, err := a.Submit(context.Background(), node.Task{Input: "block", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first task's model call", func() bool { return model.calls("block") > 0 })
	if _, err := a.Submit(context.Background(), node.Task{Input: "hold", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	// The cancellation as the node's HTTP API publishes it for the running task.
	if err := a.Cancel(context.Background(), session, "stop the first"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second task's model call", func() bool { return model.calls("hold") > 0 })
	if len(rec.sent) != 1 {
		t.Fatalf("%d task.cancel records published, want 1", len(rec.sent))
	}
	sent := rec.sent[0]
	stopA()
	// The same record, read again by the partition's next owner.
	c, _ := clusterNode(t, k, group, log, "c", 0, nil, model, grace)
	waitFor(t, 60*time.Second, "node c owns partitions", func() bool { return c.PartitionsOwned() > 0 })
	if err := c.Publisher().Publish(messages.TopicTasks, sent); err != nil {
		t.Fatal(err)
	}
	// A third task behind it on the session's partition: once it is recorded, the
	// cancellation was handled.
	if _, err := c.Submit(context.Background(), node.Task{Input: "after", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	var events []messages.Envelope
	waitFor(t, 30*time.Second, "the third task recorded", func() bool {
		events, _ = log.Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskSubmitted) == 3
	})
	close(model.release)
	waitFor(t, 30*time.Second, "every task ended", func() bool {
		st, ok, _ := c.Status(context.Background(), session)
		return ok && st.Status != messages.StatusRunning
	})
	events, _ = log.Read(context.Background(), session, 1)
	var ends []string
	for _, e := range events {
		if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
			ends = append(ends, string(e.Type)+" "+string(e.Payload))
		}
	}
	if len(ends) != 3 || !strings.HasPrefix(ends[0], "task.failed") || !strings.Contains(ends[1], `"output":"ok hold"`) {
		t.Fatalf("the tasks' ends: want the first cancelled, the second and third completed; got\n%s", strings.Join(ends, "\n"))
	}
}

// cancelRecorder is a publisher that keeps a copy of each task.cancel it publishes.
type cancelRecorder struct {
	message.Publisher
	mu   sync.Mutex
	sent []*message.Message
}

func (p *cancelRecorder) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		if topic == messages.TopicTasks && m.Metadata.Get(messages.MetaType) == messages.TypeCancelRequested {
			p.sent = append(p.sent, m.Copy())
		}
	}
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

func countType(events []messages.Envelope, typ messages.Type) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}
