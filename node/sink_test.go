package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// failingLog refuses its first writes, as a log in an outage would.
type failingLog struct {
	eventlog.Log
	failures atomic.Int32
}

func (f *failingLog) Append(ctx context.Context, events []messages.Envelope) error {
	if f.failures.Add(-1) >= 0 {
		return errors.New("log unavailable")
	}
	return f.Log.Append(ctx, events)
}

// The sink copies every event from troupe.events into another log, through a log
// outage, with nothing lost and nothing doubled.
func TestSinkCopiesEveryEventThroughAnOutage(t *testing.T) {
	k := newKafkaEnv(t)
	n := k.node(t)
	target, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = target.Close() })
	flaky := &failingLog{Log: target}
	flaky.failures.Store(3)
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: k.brokers, ConsumerGroup: "sink-" + time.Now().Format("150405.000000"),
		Topics: k.layout(3)}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	sink, err := node.NewSink(node.SinkConfig{Subscriber: sub, Log: flaky, RetryBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sink.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	prefix := "sink-" + time.Now().Format("150405.000000")
	const sessions = 8
	for i := 0; i < sessions; i++ {
		nodetest.Run(t, n, fmt.Sprintf("%s-%d", prefix, i), "What is 6 * 7?")
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < sessions; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		want, err := n.Log().Read(context.Background(), id, 1)
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, err := target.Read(context.Background(), id, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == len(want) {
				for j := range got {
					if got[j].ID != want[j].ID || got[j].Seq != uint64(j+1) {
						t.Fatalf("session %s event %d: %s/%d, want %s", id, j+1, got[j].ID, got[j].Seq, want[j].ID)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s: the sink copied %d of %d events", id, len(got), len(want))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if flaky.failures.Load() >= 0 {
		t.Fatal("the outage never happened")
	}
}
