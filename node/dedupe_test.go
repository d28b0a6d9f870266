package node_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// TestPlainTaskEventsReachWatchers publishes a plain JSON task (as a Kafka client
// would): its message ID becomes the ID of the task.submitted event, and the live
// feed must still deliver that event — each handler dedupes on its own.
func TestPlainTaskEventsReachWatchers(t *testing.T) {
	n := nodetest.Start(t, node.Config{})
	live, stop := n.Watch("plain-1")
	defer stop()
	msg := message.NewMessage("plain-task-1", []byte(`{"input":"What is 2 + 2?","session_id":"plain-1"}`))
	msg.Metadata.Set(messages.MetaSessionID, "plain-1")
	if err := n.Publisher().Publish(messages.TopicTasks, msg); err != nil {
		t.Fatal(err)
	}
	var types []messages.Type
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-live:
			types = append(types, e.Type)
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				if types[0] != messages.TypeTaskSubmitted {
					t.Fatalf("live feed began with %s, want %s: %v", types[0], messages.TypeTaskSubmitted, types)
				}
				return
			}
		case <-timeout:
			t.Fatalf("task did not finish; saw %v", types)
		}
	}
}
