//go:build unix

package sqlite_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// BenchmarkAppendTasks appends what an embedded node's sessions append for a
// two-step task, as the node does: 64 sessions at a time, each task a new session
// of 8 events in 4 batches of 2 (task.submitted with its model.requested, then
// model.responded with tool.requested, tool.completed with model.requested, and
// model.responded with task.completed), so that the writer commits the batches of
// many sessions together. The task.submitted event carries a free, time-ordered ID
// (as the node's task IDs are); every other event's ID is derived from its position
// (session/seq). An op is one task; "cpu-ns/event" is the CPU time of the whole
// process (the writer, mostly) per event written. Compare runs with benchstat.
func BenchmarkAppendTasks(b *testing.B) { benchmarkTasks(b, false) }

// BenchmarkAppendTasksLeased is BenchmarkAppendTasks as a node of a cluster (on
// Kafka) appends: under its lease of the session's partition (eventlog.Fencing),
// the first batch of each task claimed (ClaimLeased: the session is new), the
// others appended with AppendLeased.
func BenchmarkAppendTasksLeased(b *testing.B) { benchmarkTasks(b, true) }

func benchmarkTasks(b *testing.B, leased bool) {
	const (
		workers   = 64
		perTask   = 8
		batchSize = 2
	)
	l := open(b, sqlite.Config{Dir: b.TempDir()})
	ctx := testCtx(b)
	templates := make([]messages.Envelope, perTask)
	for i := range templates {
		seq := uint64(i + 1)
		var p messages.Payload
		switch seq {
		case 1:
			p = &messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?", Agent: "default"}
		case 2, 6:
			p = &messages.ModelRequested{Key: "t/" + strconv.FormatUint(seq, 10), Model: "offline", Step: int(seq / 4), Messages: 2, PromptHash: "9f86d081884c7d65"}
		case 3, 7:
			p = &messages.ModelResponded{Key: "t/" + strconv.FormatUint(seq-1, 10), Model: "offline",
				Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "144"}, LatencyUS: 812}
		case 4:
			p = &messages.ToolCallRequested{Key: "t/4", CallID: "call_1", Tool: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}
		case 5:
			p = &messages.ToolCallCompleted{Key: "t/4", CallID: "call_1", Tool: "calculator", Result: "144", LatencyUS: 35}
		case 8:
			p = &messages.TaskCompleted{Output: "144"}
		}
		e, err := messages.NewEnvelope(p)
		if err != nil {
			b.Fatal(err)
		}
		e.Seq, e.Actor = seq, "session"
		templates[i] = e
	}
	const partitions = 12
	var epoch uint64
	if leased {
		parts := make([]int, partitions)
		for i := range parts {
			parts[i] = i
		}
		var err error
		if epoch, err = l.Own(ctx, "node-1", parts); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	start := time.Now().UnixMicro()
	task := func(i int64) error {
		session := "bench-" + strconv.FormatInt(i, 10)
		events := make([]messages.Envelope, perTask)
		for j := range events {
			e := templates[j]
			e.SessionID, e.TS = session, start+i*10+int64(j)
			e.ID = session + "/" + strconv.FormatUint(e.Seq, 10)
			e.CorrelationID = session + "/1"
			if e.Seq == 1 {
				// Time-ordered, like the node's UUIDv7 task IDs.
				e.ID = fmt.Sprintf("%016x-7c5c-8d13-7e3155bc8ee6", start+i)
			} else {
				e.CausationID = events[j-1].ID
			}
			events[j] = e
		}
		for j := 0; j < perTask; j += batchSize {
			batch := events[j : j+batchSize]
			var err error
			switch lease := (eventlog.Lease{Partition: int(i % partitions), Epoch: epoch}); {
			case !leased:
				err = l.Append(ctx, batch)
			case j == 0:
				err = l.ClaimLeased(ctx, lease, batch)
			default:
				err = l.AppendLeased(ctx, lease, batch)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
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
				if err := task(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	var after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	st := l.Stats()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*perTask), "cpu-ns/event")
	if st.Transactions > 0 {
		b.ReportMetric(float64(st.Appends)/float64(st.Transactions), "appends/tx")
	}
}
