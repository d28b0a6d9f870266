//go:build review

package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// A task as large as a Java producer sends at its defaults, keyed by its session
// but on another partition than its session's (a producer's own partitioner), is
// forwarded to its session's partition and runs. The forwarded copy adds the
// session's key and headers to the record: over the 1 MiB the node's producer
// sends, the forward failed, and was tried again for ever.
func TestNearLimitTaskOnAnotherPartitionRuns(t *testing.T) {
	c := newTestCluster(t, 0)
	k := c.k
	waitOwners(t, c, 1)
	session := misplacedSessions("big", 1)[0]
	w := &kgo.Writer{Addr: kgo.TCP(k.brokers...), Topic: k.topic(messages.TopicTasks), Balancer: partitionedBalancer(),
		RequiredAcks: kgo.RequireAll, Transport: &kgo.Transport{}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	head := `{"task_id":"big","input":"echo `
	big := head + strings.Repeat("x", 1_048_480-len(head)-2) + `"}`
	if err := w.WriteMessages(ctx, kgo.Message{Key: []byte(session), Value: []byte(big)}); err != nil {
		t.Fatal(err)
	}
	if res, ok := waitTaskResult(t, k, session, "big", 40*time.Second); !ok || res.Status != messages.StatusCompleted {
		t.Errorf("task big: %+v (found %v), want it completed", res, ok)
	}
}
