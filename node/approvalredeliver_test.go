package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// answerRecorder is a publisher that keeps a copy of each task.approval it publishes.
type answerRecorder struct {
	message.Publisher
	mu   sync.Mutex
	sent []*message.Message
}

func (p *answerRecorder) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		if topic == messages.TopicTasks && m.Metadata.Get(messages.MetaType) == messages.TypeApprovalAnswer {
			p.sent = append(p.sent, m.Copy())
		}
	}
	p.mu.Unlock()
	return p.Publisher.Publish(topic, msgs...)
}

// An answer read again from troupe.tasks (its owner went down before it committed
// the offset, and the next owner reads it again) answers the call it was given
// for, once: not the call of the session's next task that the model gave the same
// call ID (models number their calls per reply: call_1_1, …), which waits still
// for a human. The email is sent once, for the first task.
func TestRedeliveredApprovalDoesNotApproveTheNextTasksCall(t *testing.T) {
	k, log, group := newKafkaEnv(t), sharedLog(t), uniqueGroup(t)
	var sent atomic.Int64
	mail := mailer(t, &sent)
	asMailer := func(c *node.Config) { c.Agents, c.Tools, c.HandoffGrace = mail.Agents, mail.Tools, heldCallGrace }
	rec := &answerRecorder{}
	a, stopA := clusterNode(t, k, group, log, "a", 0, nil, mail.Model, asMailer, func(c *node.Config) {
		rec.Publisher = c.Bus.Publisher
		c.Bus.Publisher = rec
	})
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	session := fmt.Sprintf("answer-again-%d", time.Now().UnixNano())
	if _, err := a.Submit(context.Background(), node.Task{Input: "mail bob", SessionID: session, Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	first := waitApproval(t, a, session)
	if err := a.Approve(context.Background(), session, first.Call, true, "once", messages.ApprovedByHTTP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the first task completed", func() bool {
		events, _ := log.Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskCompleted) == 1
	})
	if _, err := a.Submit(context.Background(), node.Task{Input: "mail bob again", SessionID: session, Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	second := waitApproval(t, a, session)
	if second.Key == first.Key || second.Call != first.Call {
		t.Fatalf("the second task's call %+v, want the first's call ID under another key (%+v)", second, first)
	}
	if len(rec.sent) != 1 {
		t.Fatalf("%d task.approval records published, want 1", len(rec.sent))
	}
	answer := rec.sent[0]
	stopA()
	c, _ := clusterNode(t, k, group, log, "c", 0, nil, mail.Model, asMailer)
	waitFor(t, 60*time.Second, "node c owns partitions", func() bool { return c.PartitionsOwned() > 0 })
	if err := c.Publisher().Publish(messages.TopicTasks, answer); err != nil {
		t.Fatal(err)
	}
	// A task behind it on the session's partition: once it is recorded, the answer
	// was handled.
	if _, err := c.Submit(context.Background(), node.Task{Input: "marker", SessionID: session, Agent: "mailer"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the third task recorded", func() bool {
		events, _ := log.Read(context.Background(), session, 1)
		return countType(events, messages.TypeTaskSubmitted) == 3
	})
	time.Sleep(200 * time.Millisecond) // an approved call would run now
	events, _ := log.Read(context.Background(), session, 1)
	if got := countType(events, messages.TypeApprovalResolved); got != 1 || sent.Load() != 1 {
		t.Fatalf("after the answer came again: %d approval.resolved, %d emails sent; want 1 and 1 (the second task's call waits for a human)\n%s",
			got, sent.Load(), eventTypes(events))
	}
	if again := waitApproval(t, c, session); again.Key != second.Key {
		t.Fatalf("the call waiting: %+v, want %+v", again, second)
	}
}
