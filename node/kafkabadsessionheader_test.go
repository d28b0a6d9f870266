package node_test

import (
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// A plain task without a key whose session_id header is no valid session ID was
// refused naming only "the record's key", which the record does not have: the
// reason names the header too.
func TestBadSessionHeaderIsNamedInTheRefusal(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	bad := "bad session " + time.Now().Format("150405.000000")
	k.produce(t, kgo.Message{Value: []byte(`{"input":"echo x","task_id":"x"}`),
		Headers: []kgo.Header{{Key: messages.MetaSessionID, Value: []byte(bad)}}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		var reason string
		eachRecord(t, k, node.TopicPoison, func(m kgo.Message) {
			for _, h := range m.Headers {
				if h.Key == "reason_poisoned" && strings.Contains(string(h.Value), bad) {
					reason = string(h.Value)
				}
			}
		})
		if reason != "" {
			if !strings.Contains(reason, "session_id header") {
				t.Errorf("reason %q; want it to name the session_id header", reason)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the record was not poisoned")
		}
		time.Sleep(300 * time.Millisecond)
	}
}
