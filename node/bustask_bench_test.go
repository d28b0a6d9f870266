//go:build unix

package node_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// BenchmarkBusTask runs the two-step task of BenchmarkLoopNodeConcurrent, 64
// sessions at a time, but each task arrives as a plain JSON task published on the
// tasks topic, as a task read from Kafka does: through the router, its middleware,
// the per-session order and the tasks handler (handleTask), rather than Submit.
// "cpu-ns/task" is the CPU time of the whole process per task; compare runs with
// benchstat (allocs/op is the steadier figure on a busy machine).
func BenchmarkBusTask(b *testing.B) {
	n := benchNode(b)
	const workers = 64
	run := func(i int64) {
		id := fmt.Sprintf("bus-%d", i)
		events, stop := n.Watch(id)
		defer stop()
		msg := message.NewMessage(fmt.Sprintf("bus-task-%d", i), []byte(`{"input":"What is 12 * (7 + 5)?","session_id":"`+id+`"}`))
		msg.Metadata.Set(messages.MetaSessionID, id)
		if err := n.Publisher().Publish(messages.TopicTasks, msg); err != nil {
			b.Error(err)
			return
		}
		timeout := time.After(time.Minute)
		for {
			select {
			case e, ok := <-events:
				if !ok {
					b.Error("event feed closed")
					return
				}
				switch e.Type {
				case messages.TypeTaskCompleted:
					return
				case messages.TypeTaskFailed:
					b.Errorf("task failed: %s", e.Payload)
					return
				}
			case <-timeout:
				b.Errorf("task %s: no end within a minute", id)
				return
			}
		}
	}
	var next atomic.Int64
	var before syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				run(i)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	var after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		b.Fatal(err)
	}
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/task")
}
