package kafka_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/kafka"
)

// BenchmarkPublish publishes batches as a node's outbox does (many sessions' events
// in one call) and single messages as a client submitting a task does, to kfake in
// this process (whose CPU counts too), over 12 partitions.
func BenchmarkPublish(b *testing.B) {
	for _, batch := range []int{1, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			c := newCluster(b)
			pub := c.publisher(b, func(cfg *kafka.PublisherConfig) {
				cfg.Topics.Default.Partitions = 12
			})
			defer closeAll(b, pub)
			topic := uniqueName(b, "bench-")
			payload := make([]byte, 600)
			msgs := make([]*message.Message, batch)
			for i := range msgs {
				msgs[i] = sessionMessage(fmt.Sprintf("session-%d", i%97), string(payload))
				msgs[i].Metadata.Set("type", "model.responded")
			}
			if err := pub.Publish(topic, msgs...); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			b.ResetTimer()
			for b.Loop() {
				if err := pub.Publish(topic, msgs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N*batch), "cpu-ns/msg")
		})
	}
}

// processCPU is the CPU time this process used so far, user and system, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
