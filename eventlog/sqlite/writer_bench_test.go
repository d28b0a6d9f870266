//go:build unix

package sqlite

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// BenchmarkWriteGroup is the writer alone at what an embedded node gives it: groups
// of 32 batches of 2 events, of 64 sessions at once, each task a new session of 8
// events in 4 batches (the first a Claim), as BenchmarkAppendTasks appends them,
// but with every group of the same size and no caller goroutines, so that its
// figures vary less from run to run. An op is a group; "cpu-ns/event" is the
// process's CPU time per event written.
func BenchmarkWriteGroup(b *testing.B) {
	const (
		inFlight  = 64
		groupSize = 32
		perTask   = 8
		batchSize = 2
	)
	ctx := context.Background()
	l, err := open(ctx, Config{Dir: b.TempDir()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := l.Close(); err != nil {
			b.Error(err)
		}
	})
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
	start := time.Now().UnixMicro()
	task := func(i int64) []messages.Envelope {
		session := "bench-" + strconv.FormatInt(i, 10)
		events := make([]messages.Envelope, perTask)
		for j := range events {
			e := templates[j]
			e.SessionID, e.TS = session, start+i*10+int64(j)
			e.ID = session + "/" + strconv.FormatUint(e.Seq, 10)
			e.CorrelationID = session + "/1"
			if e.Seq == 1 {
				e.ID = fmt.Sprintf("%016x-7c5c-8d13-7e3155bc8ee6", start+i) // time-ordered, like the node's task IDs
			} else {
				e.CausationID = events[j-1].ID
			}
			events[j] = e
		}
		return events
	}
	type slot struct {
		events []messages.Envelope
		next   int // the batch to append next
	}
	var (
		slots  [inFlight]slot
		tasks  int64
		turn   int
		reqs   = make([]appendReq, groupSize)
		group  = make([]*appendReq, groupSize)
		events int
	)
	for i := range slots {
		tasks++
		slots[i] = slot{events: task(tasks)}
	}
	var before syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for k := range group {
			s := &slots[turn]
			turn = (turn + 1) % inFlight
			if s.next == perTask/batchSize {
				tasks++
				*s = slot{events: task(tasks)}
			}
			reqs[k] = appendReq{ctx: ctx, events: s.events[s.next*batchSize : (s.next+1)*batchSize], claim: s.next == 0, done: make(chan error, 1)}
			s.next++
			group[k] = &reqs[k]
			events += batchSize
		}
		l.writeGroup(group)
		for _, r := range group {
			if err := <-r.done; err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	var after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
}
