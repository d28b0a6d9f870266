package eventlogtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The tests of eventlog.Claiming: a session's first batch is written only into a
// session with no events at all.

// claiming returns l's Claiming, or skips the test for a log without it.
func (s *suite) claiming(t *testing.T, l eventlog.Log) eventlog.Claiming {
	t.Helper()
	c, ok := l.(eventlog.Claiming)
	if !ok {
		t.Skipf("%T does not implement eventlog.Claiming", l)
	}
	return c
}

func (s *suite) claim(t *testing.T, c eventlog.Claiming, events ...messages.Envelope) {
	t.Helper()
	if err := c.Claim(s.ctx(t), events); err != nil {
		t.Fatalf("Claim(%s): %v", describe(events), err)
	}
}

// claimErr claims with a batch that must fail with an error wrapping want.
func (s *suite) claimErr(t *testing.T, c eventlog.Claiming, want error, events ...messages.Envelope) {
	t.Helper()
	err := c.Claim(s.ctx(t), events)
	if !errors.Is(err, want) {
		t.Fatalf("Claim(%s) = %v, want an error wrapping %q", describe(events), err, want)
	}
}

// claimLeasedErr claims under lease with a batch that must fail with an error wrapping want.
func (s *suite) claimLeasedErr(t *testing.T, c eventlog.Claiming, lease eventlog.Lease, want error, events ...messages.Envelope) {
	t.Helper()
	err := c.ClaimLeased(s.ctx(t), lease, events)
	if !errors.Is(err, want) {
		t.Fatalf("ClaimLeased(%s, %s) = %v, want an error wrapping %q", lease, describe(events), err, want)
	}
}

// testClaimNewSession: a claim of a session with no events is written like an
// Append; the same batch delivered again, or any other batch of the session, is
// refused and writes nothing, as is a claim of a session that has events only
// past the batch's seqs. Other sessions are untouched; a batch of two sessions is
// invalid; an empty batch is a no-op.
func (s *suite) testClaimNewSession(t *testing.T) {
	l := s.newLog(t)
	c := s.claiming(t, l)
	a := newSession("claimed", 1_000_000)
	events := a.task(t, completed())
	first := events[:2]
	s.claim(t, c)
	s.claim(t, c, first...)
	s.wantRead(t, l, a.id, 0, first)

	// Delivered again: refused although every event is stored at its position.
	s.claimErr(t, c, eventlog.ErrSeqConflict, first...)
	s.claimErr(t, c, eventlog.ErrSeqConflict, first[0])
	s.claimErr(t, c, eventlog.ErrSeqConflict, a.other(t, 1))
	// A batch with new events after the stored ones: refused, nothing of it written.
	s.claimErr(t, c, eventlog.ErrSeqConflict, events[:4]...)
	s.wantRead(t, l, a.id, 0, first)
	s.append(t, l, events[2:]...) // Append goes on as before
	s.wantRead(t, l, a.id, 0, events)

	// A session whose only event is past the claim's seqs has events.
	b := newSession("late-start", 2_000_000)
	late := b.event(t, 5, &messages.TaskSubmitted{Input: "x"})
	s.append(t, l, late)
	s.claimErr(t, c, eventlog.ErrSeqConflict, b.event(t, 1, &messages.TaskSubmitted{Input: "y"}))
	s.wantRead(t, l, b.id, 0, []messages.Envelope{late})

	// One session per claim; events stay valid as for Append.
	d, e := newSession("two-a", 3_000_000), newSession("two-b", 3_000_000)
	s.claimErr(t, c, eventlog.ErrInvalidEvent, d.next(t, &messages.TaskSubmitted{Input: "x"}), e.next(t, &messages.TaskSubmitted{Input: "x"}))
	bad := newSession("bad", 4_000_000).next(t, &messages.TaskSubmitted{Input: "x"})
	bad.Payload = []byte("{")
	s.claimErr(t, c, eventlog.ErrInvalidEvent, bad)
	s.wantRead(t, l, d.id, 0, nil)
	s.wantRead(t, l, e.id, 0, nil)
	s.wantRead(t, l, "bad", 0, nil)

	// An ID stored in another session conflicts, as for Append.
	moved := events[0]
	moved.SessionID = "moved"
	s.claimErr(t, c, eventlog.ErrSeqConflict, moved)
	s.wantRead(t, l, "moved", 0, nil)
	s.wantSessions(t, l, eventlog.Filter{Prefix: "claimed"}, []eventlog.SessionInfo{summary(a.id, messages.StatusCompleted, events)})
}

// testClaimConcurrent: of claims of one session racing through one log, with
// different batches, exactly one is written; the others fail with ErrSeqConflict.
func (s *suite) testClaimConcurrent(t *testing.T) {
	l := s.newLog(t)
	c := s.claiming(t, l)
	const claimers, rounds = 8, 4
	for round := range rounds {
		a := newSession(fmt.Sprintf("raced-%d", round), int64(round+1)*1_000_000)
		batches := make([][]messages.Envelope, claimers)
		for w := range claimers {
			task := a.event(t, 1, &messages.TaskSubmitted{Input: fmt.Sprintf("claimer %d", w)})
			task.ID = fmt.Sprintf("task-%d-%d", round, w)
			next := a.event(t, 2, &messages.ModelRequested{Key: fmt.Sprintf("%s/m/%d", a.id, w), Model: "offline", Step: 1})
			next.ID += fmt.Sprintf("-%d", w)
			batches[w] = []messages.Envelope{task, next}
		}
		errs := make([]error, claimers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range claimers {
			wg.Go(func() {
				<-start
				ctx, cancel := context.WithTimeout(t.Context(), s.f.OpTimeout)
				defer cancel()
				errs[w] = c.Claim(ctx, batches[w])
			})
		}
		close(start)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		waitDone(t, done, s.f.OpTimeout, "racing claims")
		winner := -1
		for w, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: claimers %d and %d both succeeded", round, winner, w)
			case err == nil:
				winner = w
			case !errors.Is(err, eventlog.ErrSeqConflict):
				t.Fatalf("round %d: claimer %d: %v, want ErrSeqConflict", round, w, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no claimer succeeded", round)
		}
		s.wantRead(t, l, a.id, 0, batches[winner])
	}
}

// testClaimFencing: ClaimLeased is fenced as AppendLeased is; a claim under the
// current lease of a session that holds only a previous owner's events (written
// before the lease was taken, or, with Features.WriteStale, behind its back) is
// refused with ErrSeqConflict: the session is not new, even where Read hides them
// or they would not conflict with AppendLeased.
func (s *suite) testClaimFencing(t *testing.T) {
	l := s.newLog(t)
	f := s.fencing(t, l)
	c := s.claiming(t, l)
	la := s.own(t, f, "node-a", 4)
	a := newSession("owned", 1_000_000)
	head := a.task(t, nil)[:2]
	if err := c.ClaimLeased(s.ctx(t), la, head); err != nil {
		t.Fatalf("ClaimLeased(%s, %s): %v", la, describe(head), err)
	}
	s.wantRead(t, l, a.id, 0, head)
	lb := s.own(t, f, "node-b", 4)

	// The stale owner's claims are fenced, of a new session or not.
	b := newSession("fresh", 2_000_000)
	fresh := b.task(t, nil)[:2]
	s.claimLeasedErr(t, c, la, eventlog.ErrFenced, fresh...)
	s.claimLeasedErr(t, c, eventlog.Lease{Partition: 9, Epoch: lb.Epoch}, eventlog.ErrFenced, fresh...)
	s.wantRead(t, l, b.id, 0, nil)
	// The new owner's claim of a session the previous owner wrote is refused, also
	// with the previous owner's very events (a task delivered again).
	s.claimLeasedErr(t, c, lb, eventlog.ErrSeqConflict, head...)
	s.claimLeasedErr(t, c, lb, eventlog.ErrSeqConflict, a.writer(t, 1, "node-b"), a.writer(t, 2, "node-b"))
	s.wantRead(t, l, a.id, 0, head)
	// A claim of a new session under the current lease is written under it: the
	// stale owner cannot append after it.
	if err := c.ClaimLeased(s.ctx(t), lb, fresh); err != nil {
		t.Fatalf("ClaimLeased(%s, %s): %v", lb, describe(fresh), err)
	}
	s.appendLeasedErr(t, f, la, eventlog.ErrFenced, b.writer(t, 3, "node-a"))
	s.wantRead(t, l, b.id, 0, fresh)

	if s.f.WriteStale == nil {
		return
	}
	// A stale owner's write that landed after the new owner took the partition.
	st := newSession("stale-only", 3_000_000)
	stale := st.writer(t, 1, "node-a")
	s.f.WriteStale(t, l, la.Epoch, []messages.Envelope{stale})
	s.claimLeasedErr(t, c, lb, eventlog.ErrSeqConflict, st.writer(t, 1, "node-b"), st.writer(t, 2, "node-b"))
	// Where the stale event would not conflict with AppendLeased (it gives way to
	// the newer epoch's event at its seq), the claim is still refused.
	hidden := newSession("stale-later", 4_000_000)
	s.f.WriteStale(t, l, la.Epoch, []messages.Envelope{hidden.writer(t, 3, "node-a")})
	s.claimLeasedErr(t, c, lb, eventlog.ErrSeqConflict, hidden.writer(t, 1, "node-b"))
	s.wantRead(t, l, hidden.id, 0, []messages.Envelope{hidden.writer(t, 3, "node-a")})
}
