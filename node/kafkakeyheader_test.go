package node_test

import (
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A plain task keyed by its session (as the README says: its session_id, else the
// record's key) from a producer that also sets a session_id header of its own (an
// application's web session, a tracing library's) naming another session ran in
// the header's session, silently: its result went out keyed by the header, and
// the key's session never saw it. A record whose key and session_id header name
// different sessions is refused to troupe.poison, both in the reason, as one whose
// type headers disagree is, and the key's later tasks run.
func TestTaskWhoseSessionHeaderDiffersFromItsKeyIsRefused(t *testing.T) {
	k := newKafkaEnv(t)
	k.node(t)
	stamp := time.Now().Format("150405.000000")
	keyed, other := "keyed-"+stamp, "header-"+stamp
	k.produce(t,
		kgo.Message{Key: []byte(keyed), Value: []byte(`{"input":"echo misrouted","task_id":"first"}`),
			Headers: []kgo.Header{{Key: messages.MetaSessionID, Value: []byte(other)}}},
		kgo.Message{Key: []byte(keyed), Value: []byte(`{"input":"echo next","task_id":"next"}`)},
	)
	if res, ok := waitTaskResult(t, k, keyed, "next", 30*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Fatalf("task next: %+v (found %v), want it completed", res, ok)
	}
	if res, ok := waitTaskResult(t, k, other, "first", time.Second); ok {
		t.Errorf("task first ran in the header's session %s: %+v; want it refused", other, res)
	}
	if res, ok := waitTaskResult(t, k, keyed, "first", time.Second); ok {
		t.Errorf("task first ran in the key's session: %+v; want it refused", res)
	}
	reasons := poisonReasons(t, k, keyed, other)
	if len(reasons) != 1 || !strings.Contains(reasons[0], keyed) || !strings.Contains(reasons[0], other) {
		t.Errorf("poisoned with reasons %q; want one naming both %s and %s", reasons, keyed, other)
	}
}
