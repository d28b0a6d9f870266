package node_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
)

// A reply_topic among Kafka's internal topics (names starting with "__":
// __consumer_offsets, __transaction_state, …) was taken: the broker never takes a
// client's record there, and the node retried the result for ever (the outbox
// held every later result and event of the node until it restarted). It is
// refused with the task, as another name Kafka would refuse is.
func TestReplyTopicAmongKafkasInternalTopicsIsRefused(t *testing.T) {
	n, base, _ := serveHTTP(t, node.Config{})
	for _, topic := range []string{"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata", "__mine"} {
		b, _ := json.Marshal(map[string]string{"input": "echo x", "reply_topic": topic})
		code, msg := postAs(t, base+"/v1/tasks", "application/json", string(b))
		if code != http.StatusBadRequest || !strings.Contains(msg, "reply_topic") {
			t.Errorf("reply_topic %q: %d %q", topic, code, msg)
		}
	}
	noSessions(t, n)
	for _, topic := range []string{"_one_underscore", "a__b"} {
		b, _ := json.Marshal(map[string]string{"input": "echo x", "reply_topic": topic})
		if code, msg := postAs(t, base+"/v1/tasks", "application/json", string(b)); code != http.StatusAccepted {
			t.Errorf("reply_topic %q: %d %q", topic, code, msg)
		}
	}
}
