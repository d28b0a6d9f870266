package eventlogtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Features describes what an implementation guarantees where the Log contract leaves
// room. The zero value is the strictest: everything visible as soon as Append returns.
type Features struct {
	// VisibilityTimeout bounds how long appended events may take to show in Read and
	// Sessions after Append returned. Zero means read-your-writes, and the suite
	// checks at once; otherwise it polls until the bound and then checks exactly.
	VisibilityTimeout time.Duration
	// SeqRaceUndetected is true when two concurrent Appends of different events at one
	// free (session, seq) may both succeed. The suite then skips the racing-writers
	// test; conflicts with events already visible must still be reported.
	SeqRaceUndetected bool
	// OpTimeout bounds each operation of the suite; zero means one minute.
	OpTimeout time.Duration
	// WriteStale writes events stamped with epoch straight into l, a log newLog
	// built, bypassing the fencing check and the conflict checks: what the write of
	// a stale owner does when its check passed just before a newer owner took the
	// partition (see eventlog.Fencing). A store whose keys refuse a taken (session,
	// seq) may drop such an event instead. Nil skips the tests of stale writes.
	WriteStale func(t *testing.T, l eventlog.Log, epoch uint64, events []messages.Envelope)
	// FencingAtomic is true when the fencing check and the write are one atomic
	// step, so that a stale owner's write never lands (SQLite checks and writes in
	// one transaction). The suite then skips the test of a newer owner appending at
	// a seq that a stale write took first, which cannot happen.
	FencingAtomic bool
}

// Run runs the conformance suite against the Log implementation that newLog builds.
// Each call of newLog must return a new, empty log, and register its own cleanup (the
// suite closes some logs itself, so Close must be idempotent anyway). Subtests run in
// parallel.
func Run(t *testing.T, f Features, newLog func(t *testing.T) eventlog.Log) {
	t.Helper()
	s := &suite{f: f, newLog: newLog}
	if s.f.OpTimeout <= 0 {
		s.f.OpTimeout = time.Minute
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"AppendRead", s.testAppendRead},
		{"ReadFromSeq", s.testReadFromSeq},
		{"OrderWithinBatch", s.testOrderWithinBatch},
		{"OrderAcrossBatches", s.testOrderAcrossBatches},
		{"UnknownSession", s.testUnknownSession},
		{"FindEvent", s.testFindEvent},
		{"EmptyBatch", s.testEmptyBatch},
		{"DuplicateAlone", s.testDuplicateAlone},
		{"DuplicateInBatch", s.testDuplicateInBatch},
		{"DuplicateWithinBatch", s.testDuplicateWithinBatch},
		{"SeqConflictAtomic", s.testSeqConflictAtomic},
		{"SeqConflictMovedID", s.testSeqConflictMovedID},
		{"SeqConflictWithinBatch", s.testSeqConflictWithinBatch},
		{"InvalidEvents", s.testInvalidEvents},
		{"ConcurrentSessions", s.testConcurrentSessions},
		{"RacingWriters", s.testRacingWriters},
		{"ConflictsIsolated", s.testConflictsIsolated},
		{"SessionsSummary", s.testSessionsSummary},
		{"SessionsStatusOutOfOrder", s.testSessionsStatusOutOfOrder},
		{"SessionsStatusQueuedTasks", s.testSessionsStatusQueuedTasks},
		{"SessionsStatusQueuedTaskFailsFirst", s.testSessionsStatusQueuedTaskFailsFirst},
		{"SessionsFilter", s.testSessionsFilter},
		{"SessionsParent", s.testSessionsParent},
		{"SessionsAgent", s.testSessionsAgent},
		{"LargePayload", s.testLargePayload},
		{"AnalyticsSkipsNotesStreams", s.testAnalyticsSkipsNotesStreams},
		{"AnalyticsCountsAForkFromItsFork", s.testAnalyticsCountsAForkFromItsFork},
		{"AnalyticsCountsAForksOwnCalls", s.testAnalyticsCountsAForksOwnCalls},
		{"AnalyticsSeries", s.testAnalyticsSeries},
		{"Close", s.testClose},
		{"CanceledContext", s.testCanceledContext},
		{"FencingRefusesStaleOwner", s.testFencingRefusesStaleOwner},
		{"FencingEpochs", s.testFencingEpochs},
		{"FencingCurrentEpoch", s.testFencingCurrentEpoch},
		{"FencingConcurrentOwners", s.testFencingConcurrentOwners},
		{"FencingHidesStaleWrites", s.testFencingHidesStaleWrites},
		{"FencingStaleWriteFirst", s.testFencingStaleWriteFirst},
		{"ClaimNewSession", s.testClaimNewSession},
		{"ClaimConcurrent", s.testClaimConcurrent},
		{"ClaimFencing", s.testClaimFencing},
		{"ReleaseOwners", s.testReleaseOwners},
		{"ReleaseArguments", s.testReleaseArguments},
		{"MarkPublished", s.testMarkPublished},
		{"MarkPublishedArguments", s.testMarkPublishedArguments},
		{"TakeOver", s.testTakeOver},
		{"TakeOverArguments", s.testTakeOverArguments},
		{"PruneBusStreams", s.testPruneBusStreams},
		{"PruneStreams", s.testPruneStreams},
		{"PruneListed", s.testPruneListed},
		{"DeleteEvents", s.testDeleteEvents},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

type suite struct {
	f      Features
	newLog func(t *testing.T) eventlog.Log
}

// ctx returns the context of one operation of a test.
func (s *suite) ctx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) append(t *testing.T, l eventlog.Log, events ...messages.Envelope) {
	t.Helper()
	if err := l.Append(s.ctx(t), events); err != nil {
		t.Fatalf("Append(%s): %v", describe(events), err)
	}
}

// appendErr appends a batch that must fail with an error wrapping want.
func (s *suite) appendErr(t *testing.T, l eventlog.Log, want error, events ...messages.Envelope) {
	t.Helper()
	err := l.Append(s.ctx(t), events)
	if !errors.Is(err, want) {
		t.Fatalf("Append(%s) = %v, want an error wrapping %q", describe(events), err, want)
	}
}

// wantRead checks that Read(session, from) returns exactly want. With eventual
// visibility it polls until as many events as wanted are visible, then compares: an
// event that should not have been written still shows as a difference.
func (s *suite) wantRead(t *testing.T, l eventlog.Log, session string, from uint64, want []messages.Envelope) {
	t.Helper()
	var (
		got      []messages.Envelope
		err      error
		ctx      = s.ctx(t)
		deadline = time.Now().Add(s.f.VisibilityTimeout)
	)
	for {
		got, err = l.Read(ctx, session, from)
		if err != nil {
			t.Fatalf("Read(%q, %d): %v", session, from, err)
		}
		if len(got) >= len(want) || !time.Now().Before(deadline) {
			break
		}
		pause(t, 20*time.Millisecond)
	}
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read(%q, %d) returned %s\nwant %s%s", session, from, describe(got), describe(want), firstDifference(got, want))
	}
}

// wantSessions checks that Sessions(f) returns exactly want, polling with eventual
// visibility.
func (s *suite) wantSessions(t *testing.T, l eventlog.Log, f eventlog.Filter, want []eventlog.SessionInfo) {
	t.Helper()
	var (
		got      []eventlog.SessionInfo
		err      error
		ctx      = s.ctx(t)
		deadline = time.Now().Add(s.f.VisibilityTimeout)
	)
	for {
		got, err = l.Sessions(ctx, f)
		if err != nil {
			t.Fatalf("Sessions(%+v): %v", f, err)
		}
		if (len(got) == 0 && len(want) == 0) || reflect.DeepEqual(got, want) {
			return
		}
		if !time.Now().Before(deadline) {
			break
		}
		pause(t, 20*time.Millisecond)
	}
	t.Fatalf("Sessions(%+v) returned\n%s\nwant\n%s", f, describeSessions(got), describeSessions(want))
}

// pause waits d, or fails the test if its context ends first.
func pause(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
		t.Fatal("test context ended while waiting for events to become visible")
	}
}

// waitDone waits for done to close within d.
func waitDone(t *testing.T, done <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s did not finish within %s", what, d)
	}
}

// session builds the events of one session: IDs "<session>/<seq>", causation chained
// to the previous event, correlation to the first, TS growing by 1ms per seq from base.
type session struct {
	id   string
	base int64
	seq  uint64
	prev string
}

func newSession(id string, baseUS int64) *session { return &session{id: id, base: baseUS} }

func (b *session) event(t *testing.T, seq uint64, p messages.Payload) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID = fmt.Sprintf("%s/%d", b.id, seq)
	e.SessionID = b.id
	e.Seq = seq
	e.CorrelationID = b.id + "/1"
	if seq > 1 {
		e.CausationID = fmt.Sprintf("%s/%d", b.id, seq-1)
	}
	e.TS = b.base + int64(seq)*1000
	e.Actor = actorOf(p.MessageType())
	return e
}

// next returns the next event of the session.
func (b *session) next(t *testing.T, p messages.Payload) messages.Envelope {
	t.Helper()
	b.seq++
	return b.event(t, b.seq, p)
}

// other returns a different event (another ID and payload) at seq.
func (b *session) other(t *testing.T, seq uint64) messages.Envelope {
	t.Helper()
	e := b.event(t, seq, &messages.ToolCallCompleted{Key: "other", CallID: "other", Tool: "clock", Result: "other writer"})
	e.ID += "-other"
	return e
}

func actorOf(typ messages.Type) string {
	switch typ {
	case messages.TypeModelResponded:
		return "model/offline"
	case messages.TypeToolCallCompleted:
		return "tool/calculator"
	}
	return "session"
}

// task returns the events of one finished task with two model calls and a tool call.
func (b *session) task(t *testing.T, end messages.Payload) []messages.Envelope {
	t.Helper()
	usage := messages.Usage{PromptTokens: 120, CompletionTokens: 30, CachedTokens: 64, CostUSD: 0.00042}
	call := messages.ToolCall{ID: "call_1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}
	key := b.id + "/m"
	events := []messages.Envelope{
		b.next(t, &messages.TaskSubmitted{Input: "What is 12 * (7 + 5)? «ünïcode» \"quoted\" \\ <tag> &", Agent: "default", MaxSteps: 8}),
		b.next(t, &messages.ModelRequested{Key: key + "1", Model: "offline", Step: 1, Messages: 2, PromptHash: "9f86d081", Tools: []string{"calculator"}}),
		b.next(t, &messages.ModelResponded{Key: key + "1", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{call}}, Usage: usage, LatencyUS: 812}),
		b.next(t, &messages.ToolCallRequested{Key: b.id + "/t/call_1", CallID: "call_1", Tool: "calculator", Arguments: call.Arguments, Step: 1}),
		b.next(t, &messages.ToolCallCompleted{Key: b.id + "/t/call_1", CallID: "call_1", Tool: "calculator", Result: "144", LatencyUS: 35}),
		b.next(t, &messages.ModelRequested{Key: key + "2", Model: "offline", Step: 2, Messages: 4, PromptHash: "5d41402a"}),
		b.next(t, &messages.ModelResponded{Key: key + "2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "144"}, Usage: usage, LatencyUS: 640}),
	}
	if end != nil {
		events = append(events, b.next(t, end))
	}
	return events
}

func completed() messages.Payload {
	return &messages.TaskCompleted{Output: "144", Steps: 2, Usage: messages.Usage{PromptTokens: 240, CompletionTokens: 60}}
}

func failed() messages.Payload {
	return &messages.TaskFailed{Reason: messages.ReasonMaxSteps, Error: "stopped after 2 steps", Steps: 2}
}

func (s *suite) testAppendRead(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1_767_225_600_000_000)
	events := a.task(t, completed())
	// A payload in a non-canonical encoding must come back byte for byte.
	odd := a.next(t, &messages.ToolCallCompleted{})
	odd.Payload = []byte("{ \"key\" : \"k\",\n\t\"call_id\":\"c\", \"tool\":\"clock\", \"result\":\"\\u00e9t\u00e9\", \"latency_us\": 1e3 }")
	events = append(events, odd)
	// A neighbour whose ID shares a prefix must not leak into s-1.
	b := newSession("s-10", 1_767_225_600_000_000)
	neighbour := b.next(t, &messages.TaskSubmitted{Input: "other"})

	s.append(t, l, events[:4]...)
	s.append(t, l, append(append([]messages.Envelope{}, events[4:]...), neighbour)...)
	s.wantRead(t, l, "s-1", 0, events)
	s.wantRead(t, l, "s-1", 1, events)
	s.wantRead(t, l, "s-10", 0, []messages.Envelope{neighbour})
	for _, e := range events[:len(events)-1] {
		if _, err := e.Decode(); err != nil {
			t.Fatalf("stored event does not decode: %v", err)
		}
	}
}

func (s *suite) testReadFromSeq(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, completed())
	s.append(t, l, events...)
	s.wantRead(t, l, "s-1", 4, events[3:])
	s.wantRead(t, l, "s-1", uint64(len(events)), events[len(events)-1:])
	s.wantRead(t, l, "s-1", uint64(len(events))+1, nil)
	s.wantRead(t, l, "s-1", 1<<63, nil)
}

func (s *suite) testOrderWithinBatch(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, completed())
	shuffled := make([]messages.Envelope, 0, len(events))
	for _, i := range []int{5, 0, 7, 2, 6, 1, 4, 3} {
		shuffled = append(shuffled, events[i])
	}
	s.append(t, l, shuffled...)
	s.wantRead(t, l, "s-1", 0, events)
}

func (s *suite) testOrderAcrossBatches(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	b := newSession("s-2", 2000)
	ea, eb := a.task(t, completed()), b.task(t, failed())
	// Later seqs first, and two sessions interleaved in one batch.
	s.append(t, l, ea[4:]...)
	s.append(t, l, eb[2], ea[0], eb[0], ea[2], eb[1], ea[3], ea[1])
	s.append(t, l, eb[3:]...)
	s.wantRead(t, l, "s-1", 0, ea)
	s.wantRead(t, l, "s-2", 0, eb)
}

func (s *suite) testUnknownSession(t *testing.T) {
	l := s.newLog(t)
	s.wantRead(t, l, "nobody", 0, nil)
	a := newSession("s-1", 1000)
	events := a.task(t, nil)
	s.append(t, l, events...)
	s.wantRead(t, l, "s-1", 0, events)
	got, err := l.Read(s.ctx(t), "nobody", 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("Read(unknown session) = %s, %v; want no events and no error", describe(got), err)
	}
}

func (s *suite) testEmptyBatch(t *testing.T) {
	l := s.newLog(t)
	s.append(t, l)
	s.append(t, l, []messages.Envelope{}...)
	s.wantSessions(t, l, eventlog.Filter{}, nil)
}

func (s *suite) testDuplicateAlone(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, completed())
	s.append(t, l, events...)
	s.append(t, l, events[3])
	s.append(t, l, events[0])
	s.append(t, l, events...)
	s.wantRead(t, l, "s-1", 0, events)
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{summary("s-1", messages.StatusCompleted, events)})
}

func (s *suite) testDuplicateInBatch(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, completed())
	s.append(t, l, events[:3]...)
	// A redelivered batch that overlaps the stored events and brings new ones.
	s.append(t, l, events[1:6]...)
	s.append(t, l, events[5], events[6], events[7], events[2])
	s.wantRead(t, l, "s-1", 0, events)
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{summary("s-1", messages.StatusCompleted, events)})
}

func (s *suite) testDuplicateWithinBatch(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, nil)
	s.append(t, l, events[0], events[1], events[0], events[2], events[1])
	s.wantRead(t, l, "s-1", 0, events[:3])
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{summary("s-1", messages.StatusRunning, events[:3])})
}

func (s *suite) testSeqConflictAtomic(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, completed())
	s.append(t, l, events[:2]...)
	// New events at seq 3 and 4 and, last, another writer's event at the taken seq 2:
	// nothing of the batch may be written, nor may another session in it.
	b := newSession("s-2", 2000)
	s.appendErr(t, l, eventlog.ErrSeqConflict, events[2], b.next(t, &messages.TaskSubmitted{Input: "x"}), events[3], a.other(t, 2))
	s.appendErr(t, l, eventlog.ErrSeqConflict, a.other(t, 1))
	s.wantRead(t, l, "s-1", 0, events[:2])
	s.wantRead(t, l, "s-2", 0, nil)
	// Seq 3 and 4 are still free: another writer can take them.
	o3, o4 := a.other(t, 3), a.other(t, 4)
	s.append(t, l, o3, o4)
	s.wantRead(t, l, "s-1", 0, []messages.Envelope{events[0], events[1], o3, o4})
	s.wantRead(t, l, "s-2", 0, nil)
	// The stored events are unchanged and the original writer is now the conflicting one.
	s.appendErr(t, l, eventlog.ErrSeqConflict, events[2])
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{
		summary("s-1", messages.StatusRunning, []messages.Envelope{events[0], events[1], o3, o4}),
	})
}

func (s *suite) testSeqConflictMovedID(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, nil)
	s.append(t, l, events[:2]...)
	// The event stored at seq 2 comes again at seq 3: a writer lost track of seqs.
	moved := events[1]
	moved.Seq = 3
	s.appendErr(t, l, eventlog.ErrSeqConflict, events[2], moved)
	// The same ID in another session is a conflict too: IDs are unique in the log.
	elsewhere := events[1]
	elsewhere.SessionID = "s-2"
	s.appendErr(t, l, eventlog.ErrSeqConflict, elsewhere)
	s.wantRead(t, l, "s-1", 0, events[:2])
	s.wantRead(t, l, "s-2", 0, nil)
	s.append(t, l, events[2])
	s.wantRead(t, l, "s-1", 0, events[:3])
}

func (s *suite) testSeqConflictWithinBatch(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, nil)
	s.appendErr(t, l, eventlog.ErrSeqConflict, events[0], events[1], a.other(t, 2))
	moved := events[0]
	moved.Seq = 3
	s.appendErr(t, l, eventlog.ErrSeqConflict, events[0], events[1], moved)
	s.wantRead(t, l, "s-1", 0, nil)
	s.append(t, l, events...)
	s.wantRead(t, l, "s-1", 0, events)
}

func (s *suite) testInvalidEvents(t *testing.T) {
	l := s.newLog(t)
	cases := []struct {
		name  string
		spoil func(e *messages.Envelope)
	}{
		{"MissingID", func(e *messages.Envelope) { e.ID = "" }},
		{"MissingSession", func(e *messages.Envelope) { e.SessionID = "" }},
		{"SeqZero", func(e *messages.Envelope) { e.Seq = 0 }},
		{"MissingType", func(e *messages.Envelope) { e.Type = "" }},
		{"EmptyPayload", func(e *messages.Envelope) { e.Payload = nil }},
		{"PayloadNotJSON", func(e *messages.Envelope) { e.Payload = []byte(`{"input":`) }},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newSession(fmt.Sprintf("s-%d", i+1), int64(i+1)*1000)
			events := a.task(t, nil)
			bad := events[1]
			tc.spoil(&bad)
			s.appendErr(t, l, eventlog.ErrInvalidEvent, events[0], bad, events[2])
			s.appendErr(t, l, eventlog.ErrInvalidEvent, bad)
			s.wantRead(t, l, a.id, 0, nil)
			// Nothing holds seq 1: a different event can take it.
			o := a.other(t, 1)
			s.append(t, l, o)
			s.wantRead(t, l, a.id, 0, []messages.Envelope{o})
		})
	}
}

func (s *suite) testConcurrentSessions(t *testing.T) {
	l := s.newLog(t)
	const writers, perWriter = 16, 40
	type result struct {
		events []messages.Envelope
		err    error
	}
	results := make([]result, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		a := newSession(fmt.Sprintf("c-%02d", w), int64(w+1)*1_000_000)
		var events []messages.Envelope
		for len(events) < perWriter {
			events = append(events, a.next(t, &messages.ModelRequested{Key: fmt.Sprintf("k-%d", a.seq+1), Model: "offline", Step: int(a.seq + 1)}))
		}
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
			defer cancel()
			for i, size := 0, 1; i < len(events); i, size = i+size, size%4+1 {
				batch := events[i:min(i+size, len(events))]
				if err := l.Append(ctx, batch); err != nil {
					results[w].err = fmt.Errorf("writer %d: Append(%s): %w", w, describe(batch), err)
					return
				}
			}
			results[w].events = events
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitDone(t, done, s.f.OpTimeout, "concurrent appends")
	var want []eventlog.SessionInfo
	for w := writers - 1; w >= 0; w-- {
		if results[w].err != nil {
			t.Fatal(results[w].err)
		}
		events := results[w].events
		s.wantRead(t, l, events[0].SessionID, 0, events)
		for i, e := range events {
			if e.Seq != uint64(i+1) {
				t.Fatalf("session %s: event %d has seq %d", e.SessionID, i, e.Seq)
			}
		}
		info := summary(events[0].SessionID, messages.StatusRunning, events)
		want = append(want, info)
	}
	s.wantSessions(t, l, eventlog.Filter{}, want)
}

func (s *suite) testRacingWriters(t *testing.T) {
	if s.f.SeqRaceUndetected {
		t.Skip("the implementation does not detect racing writers (Features.SeqRaceUndetected)")
	}
	l := s.newLog(t)
	const writers, rounds = 8, 5
	a := newSession("s-1", 1000)
	var winners []messages.Envelope
	for seq := uint64(1); seq <= rounds; seq++ {
		errs := make([]error, writers)
		candidates := make([]messages.Envelope, writers)
		for w := range writers {
			candidates[w] = a.event(t, seq, &messages.TaskSubmitted{Input: fmt.Sprintf("writer %d", w)})
			candidates[w].ID = fmt.Sprintf("s-1/%d/writer-%d", seq, w)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				<-start
				ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
				defer cancel()
				errs[w] = l.Append(ctx, candidates[w:w+1])
			})
		}
		close(start)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		waitDone(t, done, s.f.OpTimeout, "racing appends")
		winner := -1
		for w, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("seq %d: writers %d and %d both succeeded", seq, winner, w)
			case err == nil:
				winner = w
			case !errors.Is(err, eventlog.ErrSeqConflict):
				t.Fatalf("seq %d: writer %d: %v, want ErrSeqConflict", seq, w, err)
			}
		}
		if winner < 0 {
			t.Fatalf("seq %d: no writer succeeded", seq)
		}
		winners = append(winners, candidates[winner])
	}
	s.wantRead(t, l, "s-1", 0, winners)
}

// testConflictsIsolated has writers with good batches race writers with conflicting
// ones on the same sessions: every caller gets its own batch's outcome, so a
// conflicting batch never fails, nor leaks into, another caller's.
func (s *suite) testConflictsIsolated(t *testing.T) {
	l := s.newLog(t)
	const sessions, rounds = 12, 10
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make(chan error, 2*sessions*rounds)
		want  = make([][]messages.Envelope, sessions)
	)
	for i := range sessions {
		a := newSession(fmt.Sprintf("i-%02d", i), int64(i+1)*1_000_000)
		head := []messages.Envelope{a.next(t, &messages.TaskSubmitted{Input: "x"}), a.next(t, &messages.ModelRequested{Key: "k0"})}
		s.append(t, l, head...)
		good := make([][]messages.Envelope, rounds)
		bad := make([][]messages.Envelope, rounds)
		for r := range rounds {
			good[r] = []messages.Envelope{a.next(t, &messages.ModelRequested{Key: "k", Step: r}), a.next(t, &messages.ModelResponded{Key: "k"})}
			// Another writer: a new event far ahead, then one at the taken seq 2.
			far, taken := a.other(t, 1000+uint64(r)), a.other(t, 2)
			taken.ID = fmt.Sprintf("%s/taken-%d", a.id, r)
			bad[r] = []messages.Envelope{far, taken}
		}
		want[i] = slices.Concat(append([][]messages.Envelope{head}, good...)...)
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
			defer cancel()
			for r := range rounds {
				if err := l.Append(ctx, good[r]); err != nil {
					errs <- fmt.Errorf("session %s round %d: good batch: %w", a.id, r, err)
				}
			}
		})
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
			defer cancel()
			for r := range rounds {
				if err := l.Append(ctx, bad[r]); !errors.Is(err, eventlog.ErrSeqConflict) {
					errs <- fmt.Errorf("session %s round %d: conflicting batch = %v, want ErrSeqConflict", a.id, r, err)
				}
			}
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitDone(t, done, s.f.OpTimeout, "racing good and conflicting appends")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, events := range want {
		s.wantRead(t, l, events[0].SessionID, 0, events)
	}
}

// summary is the SessionInfo of a session made of events (each stored once).
func summary(id, status string, events []messages.Envelope) eventlog.SessionInfo {
	info := eventlog.SessionInfo{ID: id, Status: status, Events: len(events)}
	for i, e := range events {
		if i == 0 || e.TS < info.StartedUS {
			info.StartedUS = e.TS
		}
		info.UpdatedUS = max(info.UpdatedUS, e.TS)
		info.LastSeq = max(info.LastSeq, e.Seq)
		if e.Type == messages.TypeModelRequested {
			info.Steps++
		}
	}
	return info
}

func (s *suite) testSessionsSummary(t *testing.T) {
	l := s.newLog(t)
	done := newSession("done", 1_000_000)
	fail := newSession("fail", 2_000_000)
	busy := newSession("busy", 3_000_000)
	again := newSession("again", 4_000_000)
	quiet := newSession("quiet", 5_000_000)

	ed := done.task(t, completed())
	ef := fail.task(t, failed())
	eb := busy.task(t, nil)[:3]
	ea := append(again.task(t, completed()), again.next(t, &messages.TaskSubmitted{Input: "and now?"}),
		again.next(t, &messages.ModelRequested{Key: "again/m3", Model: "offline", Step: 1}))
	eq := []messages.Envelope{quiet.next(t, &messages.ModelRequested{Key: "quiet/m1", Model: "offline", Step: 1})}

	// Several batches per session, interleaved, and every batch redelivered once.
	batches := [][]messages.Envelope{ed[:1], ef[:3], ed[1:5], eb, ea[:8], ef[3:], ea[8:], ed[5:], eq}
	for _, batch := range batches {
		s.append(t, l, batch...)
	}
	for _, batch := range batches {
		s.append(t, l, batch...)
	}
	want := []eventlog.SessionInfo{
		summary("quiet", messages.StatusRunning, eq),
		summary("again", messages.StatusRunning, ea),
		summary("busy", messages.StatusRunning, eb),
		summary("fail", messages.StatusFailed, ef),
		summary("done", messages.StatusCompleted, ed),
	}
	if want[1].Steps != 3 || want[4].Steps != 2 || want[4].Events != 8 || want[4].LastSeq != 8 ||
		want[4].StartedUS != 1_001_000 || want[4].UpdatedUS != 1_008_000 {
		t.Fatalf("the suite's own expectations are off: %+v", want)
	}
	s.wantSessions(t, l, eventlog.Filter{}, want)
	s.wantSessions(t, l, eventlog.Filter{Limit: 100}, want)
	// By status (a node resumes the running ones when it starts), before the limit.
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning}, want[:3])
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning, Limit: 2}, want[:2])
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusFailed}, want[3:4])
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusCompleted}, want[4:])
	if _, err := l.Sessions(s.ctx(t), eventlog.Filter{Status: "sleeping"}); err == nil {
		t.Fatal("Sessions(Status: sleeping) succeeded, want an error")
	}
}

// A child session (a sub-agent's) lists with the parent its first event, a
// task.submitted, names; a later task naming another parent, or a parent named
// after the first event, changes nothing, and other sessions list with none.
func (s *suite) testSessionsParent(t *testing.T) {
	l := s.newLog(t)
	root := newSession("root", 1_000_000)
	child := newSession("root.sub4", 2_000_000)
	late := newSession("late", 3_000_000)
	er := root.task(t, completed())
	ec := []messages.Envelope{
		child.next(t, &messages.TaskSubmitted{Input: "look \"parent\": {\"session_id\": \"x\"} up", Agent: "researcher",
			Parent: &messages.ParentRef{SessionID: "root", Key: "root/4", Depth: 1}}),
		child.next(t, &messages.TaskCompleted{Output: "found"}),
		child.next(t, &messages.TaskSubmitted{Input: "again", Parent: &messages.ParentRef{SessionID: "other", Key: "other/2", Depth: 1}}),
	}
	el := []messages.Envelope{
		late.next(t, &messages.ModelRequested{Key: "late/m1", Model: "offline", Step: 1}),
		late.next(t, &messages.TaskSubmitted{Input: "hi", Parent: &messages.ParentRef{SessionID: "root", Key: "root/9", Depth: 1}}),
	}
	s.append(t, l, er...)
	s.append(t, l, ec...)
	s.append(t, l, el...)
	wantChild := summary("root.sub4", messages.StatusRunning, ec)
	wantChild.Parent = "root"
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{
		summary("late", messages.StatusRunning, el), wantChild, summary("root", messages.StatusCompleted, er),
	})
	s.wantSessions(t, l, eventlog.Filter{Limit: 1, SinceUS: 2_000_000, Status: messages.StatusRunning}, []eventlog.SessionInfo{summary("late", messages.StatusRunning, el)})
}

func (s *suite) testSessionsStatusOutOfOrder(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, failed())
	// The task's end arrives before its start: status follows the highest seq.
	s.append(t, l, events[7], events[5])
	s.append(t, l, events[:5]...)
	s.append(t, l, events[6])
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{summary("s-1", messages.StatusFailed, events)})
	next := a.next(t, &messages.TaskSubmitted{Input: "retry"})
	s.append(t, l, next)
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{summary("s-1", messages.StatusRunning, append(events, next))})
}

// A session runs its tasks one at a time: tasks submitted while one runs wait their
// turn. The session is running while any submitted task has not ended, also when the
// highest-seq task.* event is the end of an earlier task; a node resumes such a
// session when it starts, or the queued tasks would never run.
// A task that fails while it waits its turn (its deadline passed: decision rules
// 10) ends before the task running ahead of it: the session's highest-seq task.*
// event is then a failure while a task still runs. The session is running until
// that task ends, and then has its status, its end being the latest; an answer
// recorded after that end (a delegate call's late answer) changes nothing.
func (s *suite) testSessionsStatusQueuedTaskFailsFirst(t *testing.T) {
	l := s.newLog(t)
	q := newSession("queued-first", 1_000_000)
	var all []messages.Envelope
	add := func(task uint64, p messages.Payload) messages.Envelope {
		e := q.next(t, p)
		e.CorrelationID = fmt.Sprintf("queued-first/%d", task)
		all = append(all, e)
		return e
	}
	s.append(t, l,
		add(1, &messages.TaskSubmitted{Input: "one"}),
		add(1, &messages.ModelRequested{Key: "queued-first/2", Model: "offline", Step: 1}),
		add(3, &messages.TaskSubmitted{Input: "two", DeadlineUS: 1}))
	s.append(t, l, add(3, &messages.TaskFailed{Reason: messages.ReasonDeadline, Error: "the deadline passed while it waited"}))
	want := []eventlog.SessionInfo{summary("queued-first", messages.StatusRunning, all)}
	s.wantSessions(t, l, eventlog.Filter{}, want)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning}, want)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusFailed}, nil)
	s.append(t, l,
		add(1, &messages.ModelResponded{Key: "queued-first/2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "1"}}),
		add(1, &messages.TaskCompleted{Output: "1", Steps: 1}))
	s.append(t, l, add(1, &messages.ToolCallCompleted{Key: "queued-first/9", CallID: "late", Tool: "delegate", Error: "cancelled"}))
	want = []eventlog.SessionInfo{summary("queued-first", messages.StatusCompleted, all)}
	s.wantSessions(t, l, eventlog.Filter{}, want)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusCompleted}, want)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning}, nil)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusFailed}, nil)
}

func (s *suite) testSessionsStatusQueuedTasks(t *testing.T) {
	l := s.newLog(t)
	q := newSession("queued", 1_000_000)
	var all []messages.Envelope
	add := func(task uint64, p messages.Payload) messages.Envelope {
		e := q.next(t, p)
		e.CorrelationID = fmt.Sprintf("queued/%d", task)
		all = append(all, e)
		return e
	}
	// Three tasks accepted while the first runs (seq 1, 2, 3); the first ends.
	first := []messages.Envelope{
		add(1, &messages.TaskSubmitted{Input: "one"}),
		add(2, &messages.TaskSubmitted{Input: "two"}),
		add(3, &messages.TaskSubmitted{Input: "three"}),
		add(1, &messages.ModelRequested{Key: "queued/4", Model: "offline", Step: 1}),
		add(1, &messages.ModelResponded{Key: "queued/4", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "1"}}),
		add(1, &messages.TaskCompleted{Output: "1", Steps: 1}),
	}
	s.append(t, l, first[:3]...)
	s.append(t, l, first[3:]...)
	running := func() {
		t.Helper()
		want := []eventlog.SessionInfo{summary("queued", messages.StatusRunning, all)}
		s.wantSessions(t, l, eventlog.Filter{}, want)
		s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning}, want)
		s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusCompleted}, nil)
		s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusFailed}, nil)
	}
	running()
	// The second fails; the third still waits.
	s.append(t, l,
		add(2, &messages.ModelRequested{Key: "queued/7", Model: "offline", Step: 1}),
		add(2, &messages.ModelResponded{Key: "queued/7", Model: "offline", Error: "model down"}),
		add(2, &messages.TaskFailed{Reason: messages.ReasonModelError, Error: "model down", Steps: 1}))
	running()
	// The third ends: now the session's status is that of its last task.
	last := []messages.Envelope{
		add(3, &messages.ModelRequested{Key: "queued/10", Model: "offline", Step: 1}),
		add(3, &messages.ModelResponded{Key: "queued/10", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "3"}}),
		add(3, &messages.TaskCompleted{Output: "3", Steps: 1}),
	}
	s.append(t, l, last...)
	s.append(t, l, last...) // redelivered: an end counted twice must not hide a queued task later
	want := []eventlog.SessionInfo{summary("queued", messages.StatusCompleted, all)}
	s.wantSessions(t, l, eventlog.Filter{}, want)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusCompleted}, want)
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning}, nil)
	// One more task, and a redelivered copy of an earlier end: running again.
	s.append(t, l, add(4, &messages.TaskSubmitted{Input: "four"}))
	s.append(t, l, first[5])
	s.wantSessions(t, l, eventlog.Filter{Status: messages.StatusRunning}, []eventlog.SessionInfo{summary("queued", messages.StatusRunning, all)})
}

func (s *suite) testSessionsFilter(t *testing.T) {
	l := s.newLog(t)
	var all []eventlog.SessionInfo // most recently started first
	for i := range 6 {
		// Started at 10s, 20s, … but appended in a scrambled order.
		n := []int{3, 0, 5, 1, 4, 2}[i]
		a := newSession(fmt.Sprintf("f-%d", n), int64(n+1)*10_000_000)
		events := a.task(t, completed())
		s.append(t, l, events...)
		all = append(all, summary(a.id, messages.StatusCompleted, events))
	}
	// Two sessions started at the same microsecond list by ascending ID.
	twinB, twinA := newSession("twin-b", 35_000_000), newSession("twin-a", 35_000_000)
	eb, ea := twinB.task(t, nil), twinA.task(t, nil)
	s.append(t, l, eb...)
	s.append(t, l, ea...)
	all = append(all, summary("twin-a", messages.StatusRunning, ea), summary("twin-b", messages.StatusRunning, eb))
	sortByStart(all)

	s.wantSessions(t, l, eventlog.Filter{}, all)
	since := all[3].StartedUS // twin-a and twin-b are all[3] and all[4]
	s.wantSessions(t, l, eventlog.Filter{SinceUS: since}, all[:5])
	s.wantSessions(t, l, eventlog.Filter{SinceUS: since + 1}, all[:3])
	s.wantSessions(t, l, eventlog.Filter{Limit: 2}, all[:2])
	s.wantSessions(t, l, eventlog.Filter{Limit: 4}, all[:4])
	s.wantSessions(t, l, eventlog.Filter{SinceUS: since, Limit: 4}, all[:4])
	s.wantSessions(t, l, eventlog.Filter{SinceUS: since, Limit: 9}, all[:5])
	s.wantSessions(t, l, eventlog.Filter{SinceUS: all[0].StartedUS + 1}, nil)
	if _, err := l.Sessions(s.ctx(t), eventlog.Filter{Limit: -1}); err == nil {
		t.Fatal("Sessions(Limit: -1) succeeded, want an error")
	}
	// all[2] is the last to be updated before the twins start.
	s.wantSessions(t, l, eventlog.Filter{UpdatedSinceUS: all[0].UpdatedUS}, all[:1])
	s.wantSessions(t, l, eventlog.Filter{UpdatedSinceUS: all[0].UpdatedUS + 1}, nil)
	s.wantSessions(t, l, eventlog.Filter{UpdatedSinceUS: all[2].UpdatedUS}, slices.DeleteFunc(slices.Clone(all), func(i eventlog.SessionInfo) bool { return i.UpdatedUS < all[2].UpdatedUS }))
	s.wantSessions(t, l, eventlog.Filter{UpdatedSinceUS: all[2].UpdatedUS, Prefix: "f-", Limit: 1}, all[:1])
	s.wantSessions(t, l, eventlog.Filter{Prefix: "twin-"}, all[3:5])
	s.wantSessions(t, l, eventlog.Filter{Prefix: "twin-", Limit: 1}, all[3:4])
	s.wantSessions(t, l, eventlog.Filter{Prefix: "f-", SinceUS: since}, all[:3])
	s.wantSessions(t, l, eventlog.Filter{Prefix: "twin-a"}, all[3:4])
	s.wantSessions(t, l, eventlog.Filter{Prefix: "twin-ab"}, nil)
	s.wantSessions(t, l, eventlog.Filter{Prefix: "win"}, nil)
	s.wantSessions(t, l, eventlog.Filter{Prefix: "f-", Status: messages.StatusRunning}, nil)
	// No pattern characters: '%' and '_' are bytes like any other, and a prefix
	// matches whole bytes of a multi-byte ID.
	pct, und, uni := newSession("p%x/1", 1_000_000), newSession("p_x/1", 2_000_000), newSession("é/1", 3_000_000)
	ep, eu, ee := pct.task(t, nil), und.task(t, nil), uni.task(t, nil)
	s.append(t, l, ep...)
	s.append(t, l, eu...)
	s.append(t, l, ee...)
	s.wantSessions(t, l, eventlog.Filter{Prefix: "p%"}, []eventlog.SessionInfo{summary("p%x/1", messages.StatusRunning, ep)})
	s.wantSessions(t, l, eventlog.Filter{Prefix: "p_"}, []eventlog.SessionInfo{summary("p_x/1", messages.StatusRunning, eu)})
	s.wantSessions(t, l, eventlog.Filter{Prefix: "é"}, []eventlog.SessionInfo{summary("é/1", messages.StatusRunning, ee)})
	s.wantSessions(t, l, eventlog.Filter{Prefix: "é/2"}, nil)
}

func sortByStart(infos []eventlog.SessionInfo) {
	for i := 1; i < len(infos); i++ {
		for j := i; j > 0 && before(infos[j], infos[j-1]); j-- {
			infos[j], infos[j-1] = infos[j-1], infos[j]
		}
	}
}

func before(a, b eventlog.SessionInfo) bool {
	if a.StartedUS != b.StartedUS {
		return a.StartedUS > b.StartedUS
	}
	return a.ID < b.ID
}

func (s *suite) testLargePayload(t *testing.T) {
	l := s.newLog(t)
	const size = 5 << 20
	var input strings.Builder
	input.Grow(size)
	for i := 0; input.Len() < size; i++ {
		fmt.Fprintf(&input, "%09d,", i) // every offset differs, so truncation or a shift shows
	}
	a := newSession("big", 1000)
	first := a.next(t, &messages.TaskSubmitted{Input: input.String()})
	second := a.next(t, &messages.ToolCallCompleted{Key: "k", CallID: "c", Tool: "fetch", Result: input.String()[:size/2]})
	if len(first.Payload) < size {
		t.Fatalf("payload is %d bytes, want at least %d", len(first.Payload), size)
	}
	third := a.next(t, completed())
	s.append(t, l, first)
	s.append(t, l, second, third)
	got, err := l.Read(s.ctx(t), "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 3 && (len(got[0].Payload) != len(first.Payload) || len(got[1].Payload) != len(second.Payload)) {
		t.Fatalf("payloads came back with %d and %d bytes, want %d and %d",
			len(got[0].Payload), len(got[1].Payload), len(first.Payload), len(second.Payload))
	}
	s.wantRead(t, l, "big", 0, []messages.Envelope{first, second, third})
}

func (s *suite) testClose(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	s.append(t, l, a.next(t, &messages.TaskSubmitted{Input: "x"}))
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := s.ctx(t)
	if err := l.Append(ctx, []messages.Envelope{a.next(t, &messages.TaskSubmitted{Input: "y"})}); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
	if _, err := l.Read(ctx, "s-1", 0); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Read after Close = %v, want ErrClosed", err)
	}
	if _, err := l.Sessions(ctx, eventlog.Filter{}); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Sessions after Close = %v, want ErrClosed", err)
	}

	// Close while appends are in flight: each one either succeeds or fails, none hangs.
	l = s.newLog(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for w := range 8 {
		b := newSession(fmt.Sprintf("w-%d", w), 1000)
		events := make([]messages.Envelope, 20)
		for i := range events {
			events[i] = b.next(t, &messages.TaskSubmitted{Input: "x"})
		}
		wg.Go(func() {
			for i := range events {
				ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
				err := l.Append(ctx, events[i:i+1])
				cancel()
				if err != nil && !errors.Is(err, eventlog.ErrClosed) {
					errs <- err
				}
			}
		})
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close during appends: %v", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitDone(t, done, s.f.OpTimeout, "appends racing Close")
	close(errs)
	for err := range errs {
		t.Errorf("Append racing Close = %v, want nil or ErrClosed", err)
	}
}

func (s *suite) testCanceledContext(t *testing.T) {
	l := s.newLog(t)
	a := newSession("s-1", 1000)
	events := a.task(t, nil)
	s.append(t, l, events[0])

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Append(canceled, events[1:3]); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append(canceled ctx) = %v, want context.Canceled", err)
	}
	if _, err := l.Read(canceled, "s-1", 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Read(canceled ctx) = %v, want context.Canceled", err)
	}
	if _, err := l.Sessions(canceled, eventlog.Filter{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sessions(canceled ctx) = %v, want context.Canceled", err)
	}
	expired, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel()
	if err := l.Append(expired, events[1:3]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append(expired ctx) = %v, want context.DeadlineExceeded", err)
	}
	// A batch refused for its context was not written: others can take its seqs.
	o2 := a.other(t, 2)
	s.append(t, l, o2)
	s.wantRead(t, l, "s-1", 0, []messages.Envelope{events[0], o2})
}

func describe(events []messages.Envelope) string {
	if len(events) == 0 {
		return "[]"
	}
	parts := make([]string, len(events))
	for i, e := range events {
		parts[i] = fmt.Sprintf("%s@%s#%d(%s, %dB)", e.ID, e.SessionID, e.Seq, e.Type, len(e.Payload))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func describeSessions(infos []eventlog.SessionInfo) string {
	if len(infos) == 0 {
		return "  (none)"
	}
	var b strings.Builder
	for _, i := range infos {
		fmt.Fprintf(&b, "  %+v\n", i)
	}
	return b.String()
}

func firstDifference(got, want []messages.Envelope) string {
	for i := range min(len(got), len(want)) {
		if reflect.DeepEqual(got[i], want[i]) {
			continue
		}
		g, w := got[i], want[i]
		g.Payload, w.Payload = nil, nil
		if !reflect.DeepEqual(g, w) {
			return fmt.Sprintf("\nfirst difference at index %d:\n got  %+v\n want %+v", i, g, w)
		}
		gp, wp := got[i].Payload, want[i].Payload
		for j := range min(len(gp), len(wp)) {
			if gp[j] != wp[j] {
				return fmt.Sprintf("\nfirst difference at index %d: payload byte %d (%d and %d bytes)", i, j, len(gp), len(wp))
			}
		}
		return fmt.Sprintf("\nfirst difference at index %d: payload of %d bytes, want %d", i, len(gp), len(wp))
	}
	return ""
}

// A fork (replay fork) copies its parent's first events with their times, then
// records session.forked at the time it was made: Analytics counts its duration
// and steps from that event, not from its parent's first event. Counted from the
// copies, a fork made five minutes after its parent lasted five minutes.
func (s *suite) testAnalyticsCountsAForkFromItsFork(t *testing.T) {
	l := s.newLog(t)
	a, ok := l.(eventlog.Analytics)
	if !ok {
		t.Skip("the log has no analytics")
	}
	parent := newSession("fork-parent", 1_000_000)
	events := parent.task(t, completed()) // 8 events 1 ms apart: 7 ms, 2 steps
	s.append(t, l, events...)
	const madeUS = 294_000_000 // the fork is made 293 s after its parent began
	fork := newSession("fork-child", madeUS-4*1000)
	var forked []messages.Envelope
	for _, e := range events[:3] { // task.submitted, model.requested, model.responded
		e.ID = fmt.Sprintf("%s/%d", fork.id, e.Seq)
		e.SessionID, e.CorrelationID = fork.id, fork.id+"/1"
		if e.Seq > 1 {
			e.CausationID = fmt.Sprintf("%s/%d", fork.id, e.Seq-1)
		}
		forked = append(forked, e)
	}
	fork.seq = 3
	forked = append(forked, fork.next(t, &messages.SessionForked{ParentID: parent.id, AtSeq: 3}))
	usage := messages.Usage{PromptTokens: 120, CompletionTokens: 30}
	call := messages.ToolCall{ID: "call_2", Name: "calculator", Arguments: `{"expression":"2 + 2"}`}
	forked = append(forked,
		fork.next(t, &messages.ToolCallRequested{Key: fork.id + "/t/call_2", CallID: "call_2", Tool: "calculator", Arguments: call.Arguments, Step: 1}),
		fork.next(t, &messages.ToolCallCompleted{Key: fork.id + "/t/call_2", CallID: "call_2", Tool: "calculator", Result: "4", LatencyUS: 20}),
		fork.next(t, &messages.ModelRequested{Key: fork.id + "/m2", Model: "offline", Step: 2, Messages: 4, PromptHash: "aa"}),
		fork.next(t, &messages.ModelResponded{Key: fork.id + "/m2", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{call}}, Usage: usage, LatencyUS: 500}),
		fork.next(t, &messages.ModelRequested{Key: fork.id + "/m3", Model: "offline", Step: 3, Messages: 6, PromptHash: "bb"}),
		fork.next(t, &messages.ModelResponded{Key: fork.id + "/m3", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "4"}, Usage: usage, LatencyUS: 400}),
		fork.next(t, &messages.ToolCallRequested{Key: fork.id + "/t/call_3", CallID: "call_3", Tool: "clock", Arguments: `{}`, Step: 3}),
		fork.next(t, completed()), // seq 12: 8 ms after the fork, 2 steps of its own
	)
	s.append(t, l, forked...)
	s.wantRead(t, l, fork.id, 1, forked)
	var (
		got      []eventlog.SessionUsage
		deadline = time.Now().Add(s.f.VisibilityTimeout)
	)
	for {
		st, err := a.Report(s.ctx(t), eventlog.StatsFilter{})
		if err != nil {
			t.Fatalf("Report: %v", err)
		}
		got = st.Sessions
		if len(got) == 1 && got[0].Sessions == 2 && got[0].Completed == 2 {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("Report's sessions = %+v, want two completed sessions of agent default", got)
		}
		pause(t, 20*time.Millisecond)
	}
	if g := got[0]; g.P95DurationUS != 8000 || g.P50DurationUS > 8000 || g.AvgSteps != 2 {
		t.Errorf("Report's sessions = %+v: want durations of 7 ms (the parent) and 8 ms (the fork, from its session.forked event), not %d µs from its parent's first event, and 2 steps each",
			got, 12*1000+madeUS-4*1000-1_001_000)
	}
}

// A fork's events before its session.forked event are its parent's model calls,
// tool calls and memory operations, copied, not made again: Analytics charges
// the fork with those after it only, so that a fork's tokens and cost are its
// own and the parent's are not counted twice.
func (s *suite) testAnalyticsCountsAForksOwnCalls(t *testing.T) {
	l := s.newLog(t)
	a, ok := l.(eventlog.Analytics)
	if !ok {
		t.Skip("the log has no analytics")
	}
	parent := newSession("calls-parent", 1_000_000)
	events := parent.task(t, nil) // a model call of 120 prompt tokens, a tool call, another model call
	events = append(events,
		parent.next(t, &messages.MemoryRemembered{Key: parent.id + "/8/remember", Reason: "remembered: 1 fact"}),
		parent.next(t, completed()))
	s.append(t, l, events...)
	fork := newSession("calls-fork", 60_000_000)
	var forked []messages.Envelope
	for _, e := range events[:8] { // up to the memory write, a model call of 120 prompt tokens
		e.ID = fmt.Sprintf("%s/%d", fork.id, e.Seq)
		e.SessionID, e.CorrelationID = fork.id, fork.id+"/1"
		if e.Seq > 1 {
			e.CausationID = fmt.Sprintf("%s/%d", fork.id, e.Seq-1)
		}
		forked = append(forked, e)
	}
	fork.seq = 8
	forked = append(forked,
		fork.next(t, &messages.SessionForked{ParentID: parent.id, AtSeq: 8}),
		fork.next(t, &messages.ModelRequested{Key: fork.id + "/m3", Model: "offline", Step: 3, Messages: 6, PromptHash: "cc"}),
		fork.next(t, &messages.ModelResponded{Key: fork.id + "/m3", Model: "offline", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "144"},
			Usage: messages.Usage{PromptTokens: 7, CompletionTokens: 1, CostUSD: 0.5}, LatencyUS: 400}),
		fork.next(t, completed()),
	)
	s.append(t, l, forked...)
	s.wantRead(t, l, fork.id, 1, forked)
	var (
		st       *eventlog.Stats
		err      error
		deadline = time.Now().Add(s.f.VisibilityTimeout)
	)
	for {
		st, err = a.Report(s.ctx(t), eventlog.StatsFilter{})
		if err != nil {
			t.Fatalf("Report: %v", err)
		}
		if len(st.Sessions) == 1 && st.Sessions[0].Completed == 2 {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("Report's sessions = %+v, want two completed sessions of agent default", st.Sessions)
		}
		pause(t, 20*time.Millisecond)
	}
	var calls, prompt int64
	var cost float64
	for _, m := range st.Models {
		calls, prompt, cost = calls+m.Calls, prompt+m.PromptTokens, cost+m.CostUSD
	}
	if calls != 3 || prompt != 247 || cost < 0.5008 || cost > 0.5009 {
		t.Errorf("Report's models = %+v: %d calls, %d prompt tokens, $%g; want 3 calls (the parent's 2, the fork's own 1), 247 prompt tokens and $0.50084, not the parent's calls again",
			st.Models, calls, prompt, cost)
	}
	if len(st.Tools) != 1 || st.Tools[0].Calls != 1 {
		t.Errorf("Report's tools = %+v; want the parent's 1 calculator call, not its copy in the fork", st.Tools)
	}
	if len(st.Memory) != 1 || st.Memory[0].Count != 1 {
		t.Errorf("Report's memory = %+v; want the parent's 1 memory.remembered, not its copy in the fork", st.Memory)
	}
}

// A notes stream (eventlog.NotesStreamPrefix) holds an agent's notes, and a
// knowledge base's stream (eventlog.KnowledgeStreamPrefix) its documents, not a
// task: Analytics counts no session for either, running or otherwise.
func (s *suite) testAnalyticsSkipsNotesStreams(t *testing.T) {
	l := s.newLog(t)
	a, ok := l.(eventlog.Analytics)
	if !ok {
		t.Skip("the log has no analytics")
	}
	done := newSession("done", 1_000_000)
	notes := newSession(eventlog.NotesStreamPrefix+"default", 2_000_000)
	s.append(t, l, done.task(t, completed())...)
	kept := []messages.Envelope{notes.next(t, &messages.NoteAdded{NoteID: "n1", Type: "fact", Body: "the sky is blue"}),
		notes.next(t, &messages.NoteRemoved{NoteID: "n1"})}
	s.append(t, l, kept...)
	s.wantRead(t, l, notes.id, 1, kept) // written, and visible to Report
	kb := newSession(eventlog.KnowledgeStreamPrefix+"docs", 3_000_000)
	kbEvents := []messages.Envelope{kb.next(t, &messages.KBDocumentRemoved{Reason: "removed", Source: "a.md"})}
	s.append(t, l, kbEvents...)
	s.wantRead(t, l, kb.id, 1, kbEvents)
	push := newSession(eventlog.A2APushStreamPrefix+"ctx~0123", 4_000_000)
	pushEvents := []messages.Envelope{push.next(t, &messages.A2APushDeleted{ConfigID: "p1"})}
	s.append(t, l, pushEvents...)
	s.wantRead(t, l, push.id, 1, pushEvents)
	signIn := newSession(eventlog.UISignInStreamPrefix+"5e1f", 5_000_000)
	signInEvents := []messages.Envelope{signIn.next(t, &messages.UISignedIn{TokenMAC: "ab", CSRFHash: "cd", ExpiresUS: 9_000_000}),
		signIn.next(t, &messages.UISignedOut{Reason: "logout"})}
	s.append(t, l, signInEvents...)
	s.wantRead(t, l, signIn.id, 1, signInEvents)
	stored := newSession(messages.EffectStream(messages.BusStoredReply, messages.EffectKey{SessionID: "done", Seq: 2}), 6_000_000)
	storedEvents := []messages.Envelope{stored.next(t, &messages.BusStored{Message: []byte(`{"v":1,"session_id":"done","key":"done/2","output":"long"}`)})}
	s.append(t, l, storedEvents...)
	s.wantRead(t, l, stored.id, 1, storedEvents)
	var (
		got      []eventlog.SessionUsage
		deadline = time.Now().Add(s.f.VisibilityTimeout)
	)
	for {
		st, err := a.Report(s.ctx(t), eventlog.StatsFilter{})
		if err != nil {
			t.Fatalf("Report: %v", err)
		}
		got = st.Sessions
		if len(got) == 1 && got[0].Agent == "default" && got[0].Sessions == 1 && got[0].Completed == 1 && got[0].Running == 0 {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("Report's sessions = %+v, want one completed session of agent default (the notes, knowledge base, A2A push, sign-in and stored bus message streams are none)", got)
		}
		pause(t, 20*time.Millisecond)
	}
	// Sessions lists them all, but with SessionsOnly the agents' sessions only,
	// whatever else narrows the list.
	ids := func(f eventlog.Filter) []string {
		infos, err := l.Sessions(s.ctx(t), f)
		if err != nil {
			t.Fatalf("Sessions(%+v): %v", f, err)
		}
		var out []string
		for _, i := range infos {
			out = append(out, i.ID)
		}
		return out
	}
	for _, c := range []struct {
		f    eventlog.Filter
		want []string
	}{
		{eventlog.Filter{}, []string{stored.id, signIn.id, push.id, kb.id, notes.id, done.id}},
		{eventlog.Filter{SessionsOnly: true}, []string{done.id}},
		{eventlog.Filter{SessionsOnly: true, Limit: 1}, []string{done.id}},
		{eventlog.Filter{SessionsOnly: true, Status: messages.StatusRunning}, nil},
		{eventlog.Filter{SessionsOnly: true, Status: messages.StatusCompleted}, []string{done.id}},
		{eventlog.Filter{SessionsOnly: true, Prefix: eventlog.UISignInStreamPrefix}, nil},
	} {
		if got := ids(c.f); !slices.Equal(got, c.want) {
			t.Errorf("Sessions(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// testSessionsAgent lists the sessions of one agent (Filter.Agent): that named by
// the session's first task.submitted, "default" for one naming none; the limit
// counts that agent's sessions only, however many newer sessions other agents
// have.
func (s *suite) testSessionsAgent(t *testing.T) {
	l := s.newLog(t)
	submit := func(b *session, agent string) messages.Envelope {
		return b.next(t, &messages.TaskSubmitted{Input: "go \"agent\": \"writer\"", Agent: agent})
	}
	// The researcher's sessions are the oldest: a completed one, and a running one
	// whose second task names another agent.
	old := newSession("old", 1_000_000)
	eo := []messages.Envelope{submit(old, "researcher"), old.next(t, completed())}
	mid := newSession("mid", 2_000_000)
	em := []messages.Envelope{submit(mid, "researcher"), mid.next(t, completed()), submit(mid, "writer")}
	s.append(t, l, eo...)
	s.append(t, l, em...)
	var newer []eventlog.SessionInfo // the default agent's, newer than the researcher's
	for i := range 5 {
		b := newSession(fmt.Sprintf("new-%d", i), int64(10+i)*1_000_000)
		events := []messages.Envelope{submit(b, ""), b.next(t, completed())}
		if i == 4 {
			events = []messages.Envelope{submit(b, "default"), b.next(t, completed())}
		}
		s.append(t, l, events...)
		newer = append(newer, summary(b.id, messages.StatusCompleted, events))
	}
	slices.Reverse(newer)
	writer := newSession("writer-1", 20_000_000)
	ew := []messages.Envelope{submit(writer, "writer")}
	s.append(t, l, ew...)
	// A stream with no task.submitted has no agent, not even the default one.
	notes := newSession(eventlog.NotesStreamPrefix+"default", 30_000_000)
	s.append(t, l, notes.next(t, &messages.NoteAdded{NoteID: "n1", Type: "fact", Body: "kept"}))

	sOld, sMid := summary("old", messages.StatusCompleted, eo), summary("mid", messages.StatusRunning, em)
	sWriter := summary("writer-1", messages.StatusRunning, ew)
	s.wantSessions(t, l, eventlog.Filter{Agent: "researcher"}, []eventlog.SessionInfo{sMid, sOld})
	s.wantSessions(t, l, eventlog.Filter{Agent: "researcher", Limit: 1}, []eventlog.SessionInfo{sMid})
	s.wantSessions(t, l, eventlog.Filter{Agent: "researcher", Limit: 1, SinceUS: 1_000_000, Status: messages.StatusCompleted}, []eventlog.SessionInfo{sOld})
	s.wantSessions(t, l, eventlog.Filter{Agent: "researcher", SessionsOnly: true, Status: messages.StatusRunning}, []eventlog.SessionInfo{sMid})
	s.wantSessions(t, l, eventlog.Filter{Agent: "writer"}, []eventlog.SessionInfo{sWriter})
	s.wantSessions(t, l, eventlog.Filter{Agent: "writer", SessionsOnly: true, Status: messages.StatusRunning}, []eventlog.SessionInfo{sWriter})
	s.wantSessions(t, l, eventlog.Filter{Agent: "default"}, newer)
	s.wantSessions(t, l, eventlog.Filter{Agent: "default", Limit: 2, Prefix: "new-"}, newer[:2])
	s.wantSessions(t, l, eventlog.Filter{Agent: "researcher", UpdatedSinceUS: sMid.UpdatedUS}, []eventlog.SessionInfo{sMid})
	s.wantSessions(t, l, eventlog.Filter{Agent: "nobody"}, nil)
	s.wantSessions(t, l, eventlog.Filter{Agent: "Researcher"}, nil)
}

// Asked for a series (StatsFilter.Buckets), Analytics cuts the range into buckets
// of time and gives each the figures the dashboard's charts show: tokens and cost
// of the model calls, the tool calls' latencies, and the failures, of the events in
// it and of no other. The charts read every event of up to 100 sessions for them.
func (s *suite) testAnalyticsSeries(t *testing.T) {
	l := s.newLog(t)
	a, ok := l.(eventlog.Analytics)
	if !ok {
		t.Skip("the log has no analytics")
	}
	const base = 1_767_225_600_000_000
	in := newSession("series-in", base) // events at base + seq ms
	before := newSession("series-before", base-100_000)
	after := newSession("series-after", base+20_000)
	s.append(t, l, in.task(t, failed())...)
	s.append(t, l, before.task(t, completed())...)
	s.append(t, l, after.task(t, completed())...)
	f := eventlog.StatsFilter{SinceUS: base, UntilUS: base + 10_000, Buckets: 2}
	want := []eventlog.SeriesBucket{
		{StartUS: base, Tokens: 150, CostUSD: 0.00042},
		{StartUS: base + 5_000, Tokens: 150, CostUSD: 0.00042, ToolCalls: 1, ToolLatencyUS: 35, ToolLatencyMaxUS: 35, Errors: 1},
	}
	near := func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }
	same := func(got []eventlog.SeriesBucket) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			g, w := got[i], want[i]
			g.CostUSD, w.CostUSD = 0, 0
			if g != w || !near(got[i].CostUSD, want[i].CostUSD) {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(s.f.VisibilityTimeout)
	for {
		st, err := a.Report(s.ctx(t), f)
		if err != nil {
			t.Fatalf("Report: %v", err)
		}
		if same(st.Series) {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("Report's series = %+v, want %+v", st.Series, want)
		}
		pause(t, 20*time.Millisecond)
	}
	if st, err := a.Report(s.ctx(t), eventlog.StatsFilter{SinceUS: base}); err != nil || st.Series != nil {
		t.Errorf("Report without buckets: series %+v, %v; want none", st.Series, err)
	}
	if _, err := a.Report(s.ctx(t), eventlog.StatsFilter{SinceUS: base, UntilUS: base, Buckets: 2}); err == nil {
		t.Errorf("Report of a series that ends where it starts: no error")
	}
}
