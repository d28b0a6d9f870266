package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// statsEvents is a log of sessions started every step µs, each of a task of
// about ten events a second apart (a model call, a tool call, a memory write)
// that completes, fails or runs on, of agents "a", "b" and the default one;
// every seventh session submits a second task (another agent's) a thousand
// steps later, and every eleventh is a fork of the session before it, made
// fifty steps after it, with that session's first four events copied with
// their times. Its times span sessions × step µs from start.
func statsEvents(sessions int, start, step int64) ([]messages.Envelope, error) {
	var all []messages.Envelope
	seqs := map[string]uint64{}
	first := map[string]int{} // the index in all of a session's first event
	var err error
	add := func(session string, ts int64, p messages.Payload) {
		e, nerr := messages.NewEnvelope(p)
		if nerr != nil {
			err = nerr
			return
		}
		if seqs[session] == 0 {
			first[session] = len(all)
		}
		seqs[session]++
		e.SessionID, e.Seq, e.TS, e.Actor = session, seqs[session], ts, "session"
		e.ID = fmt.Sprintf("%s/%d", session, e.Seq)
		all = append(all, e)
	}
	const second = 1_000_000
	agents := []string{"a", "b", ""}
	task := func(session string, i int, ts int64, agent string) {
		add(session, ts, &messages.TaskSubmitted{Input: "x", Agent: agent})
		for k := range 2 {
			key := fmt.Sprintf("%s/m%d", session, seqs[session])
			ts += second
			add(session, ts, &messages.ModelRequested{Key: key, Model: "m", Step: k + 1})
			ts += second
			add(session, ts, &messages.ModelResponded{Key: key, Model: fmt.Sprintf("m%d", i%3),
				Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"},
				Usage:   messages.Usage{PromptTokens: 10 + i%7, CompletionTokens: 3, CostUSD: 0.001}, LatencyUS: 10})
			ts += second
			var failed string
			if i%5 == 0 {
				failed = "boom"
			}
			add(session, ts, &messages.ToolCallCompleted{Key: key + "/t", CallID: "c", Tool: fmt.Sprintf("tool%d", i%4),
				Result: "r", Error: failed, LatencyUS: int64(100 + i%97)})
		}
		ts += second
		add(session, ts, &messages.MemoryRemembered{Key: session + "/r", Reason: "a fact", Facts: 1})
		ts += second
		switch i % 6 {
		case 0:
			add(session, ts, &messages.TaskFailed{Error: "boom"})
		case 1:
			// running on
		default:
			add(session, ts, &messages.TaskCompleted{Output: "y"})
		}
	}
	for i := range sessions {
		session := fmt.Sprintf("s%06d", i)
		ts := start + int64(i)*step
		task(session, i, ts, agents[i%3])
		if i%7 == 0 {
			task(session, i+1, ts+1000*step, agents[(i+1)%3])
		}
		if i%11 == 10 {
			parent, fork := fmt.Sprintf("s%06d", i-1), fmt.Sprintf("f%06d", i)
			for _, e := range slices.Clone(all[first[parent] : first[parent]+4]) {
				seqs[fork]++
				e.SessionID, e.Seq, e.ID = fork, seqs[fork], fmt.Sprintf("%s/%d", fork, seqs[fork])
				all = append(all, e)
			}
			add(fork, ts+50*step, &messages.SessionForked{ParentID: parent, AtSeq: 4})
			task(fork, i+2, ts+50*step+second, agents[(i+2)%3])
		}
	}
	return all, err
}

// appendStats appends events in batches of a thousand.
func appendStats(ctx context.Context, l *Log, events []messages.Envelope) error {
	for len(events) > 0 {
		n := min(len(events), 1000)
		if err := l.Append(ctx, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

// BenchmarkReport is Report as the dashboard's charts page asks it, over a log
// of about 200,000 events spanning two years: the stats of the latest 5% of
// that time, without and with a series of 24 buckets, and of the whole log.
func BenchmarkReport(b *testing.B) {
	ctx := context.Background()
	const (
		sessions = 17_000
		start    = int64(1_700_000_000_000_000)
		step     = int64(3_700_000_000) // about an hour
	)
	events, err := statsEvents(sessions, start, step)
	if err != nil {
		b.Fatal(err)
	}
	l, err := Open(ctx, Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close() //nolint:errcheck // a benchmark's log
	if err := appendStats(ctx, l, events); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d events", len(events))
	end := start + int64(sessions)*step
	since := end - (end-start)/20
	for _, c := range []struct {
		name string
		f    eventlog.StatsFilter
	}{
		{"recent", eventlog.StatsFilter{SinceUS: since}},
		{"recent-buckets24", eventlog.StatsFilter{SinceUS: since, UntilUS: end, Buckets: 24}},
		{"all", eventlog.StatsFilter{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				st, err := l.Report(ctx, c.f)
				if err != nil {
					b.Fatal(err)
				}
				if len(st.Sessions) == 0 {
					b.Fatal("no sessions in the range")
				}
			}
		})
	}
}
