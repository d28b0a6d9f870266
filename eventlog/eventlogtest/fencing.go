package eventlogtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The tests of eventlog.Fencing: a stale partition owner's appends are refused, and
// the writes of one whose check passed just before a newer owner took over are
// hidden from Read.

// fencing returns l's Fencing, or skips the test for a log without it.
func (s *suite) fencing(t *testing.T, l eventlog.Log) eventlog.Fencing {
	t.Helper()
	f, ok := l.(eventlog.Fencing)
	if !ok {
		t.Skipf("%T does not implement eventlog.Fencing", l)
	}
	return f
}

// own takes partition for node and returns the lease.
func (s *suite) own(t *testing.T, f eventlog.Fencing, node string, partition int) eventlog.Lease {
	t.Helper()
	epoch, err := f.Own(s.ctx(t), node, []int{partition})
	if err != nil {
		t.Fatalf("Own(%s, partition %d): %v", node, partition, err)
	}
	if epoch == 0 {
		t.Fatalf("Own(%s, partition %d) returned epoch 0, which is Append's", node, partition)
	}
	return eventlog.Lease{Partition: partition, Epoch: epoch}
}

func (s *suite) appendLeased(t *testing.T, f eventlog.Fencing, lease eventlog.Lease, events ...messages.Envelope) {
	t.Helper()
	if err := f.AppendLeased(s.ctx(t), lease, events); err != nil {
		t.Fatalf("AppendLeased(%s, %s): %v", lease, describe(events), err)
	}
}

// appendLeasedErr appends a batch under lease that must fail with an error wrapping want.
func (s *suite) appendLeasedErr(t *testing.T, f eventlog.Fencing, lease eventlog.Lease, want error, events ...messages.Envelope) {
	t.Helper()
	err := f.AppendLeased(s.ctx(t), lease, events)
	if !errors.Is(err, want) {
		t.Fatalf("AppendLeased(%s, %s) = %v, want an error wrapping %q", lease, describe(events), err, want)
	}
}

// writer returns another writer's version of the event at seq of the session: the
// same (canonical) ID, another payload, as a second owner folding the same history
// would decide it.
func (b *session) writer(t *testing.T, seq uint64, who string) messages.Envelope {
	t.Helper()
	e := b.event(t, seq, &messages.ToolCallCompleted{Key: fmt.Sprintf("%s/t/%d", b.id, seq), CallID: "call", Tool: "clock", Result: "written by " + who})
	e.TS += int64(len(who)) // another clock
	return e
}

// testFencingRefusesStaleOwner: once a newer owner took the partition, the stale
// owner's appends fail with ErrFenced and write nothing, also when they repeat
// the (canonical) IDs of events the new owner wrote at the same seqs.
func (s *suite) testFencingRefusesStaleOwner(t *testing.T) {
	l := s.newLog(t)
	f := s.fencing(t, l)
	a := newSession("fenced", 1_000_000)
	head := a.task(t, nil)[:3]

	la := s.own(t, f, "node-a", 3)
	s.appendLeased(t, f, la, head...)
	lb := s.own(t, f, "node-b", 3)
	if lb.Epoch <= la.Epoch {
		t.Fatalf("the second Own of partition 3 returned epoch %d, not above the first's %d", lb.Epoch, la.Epoch)
	}
	stale := []messages.Envelope{a.writer(t, 4, "node-a"), a.writer(t, 5, "node-a")}
	s.appendLeasedErr(t, f, la, eventlog.ErrFenced, stale...)
	s.wantRead(t, l, a.id, 0, head)

	// The new owner goes on from what it read; the stale owner's same seqs (same
	// IDs) are still refused, not taken for duplicates.
	mine := []messages.Envelope{a.writer(t, 4, "node-b"), a.writer(t, 5, "node-b")}
	s.appendLeased(t, f, lb, mine...)
	s.appendLeasedErr(t, f, la, eventlog.ErrFenced, stale...)
	s.appendLeasedErr(t, f, la, eventlog.ErrFenced, stale[1], a.writer(t, 6, "node-a"))
	s.appendLeased(t, f, lb, mine...) // delivered again: a no-op
	want := append(append([]messages.Envelope{}, head...), mine...)
	s.wantRead(t, l, a.id, 0, want)
	s.wantSessions(t, l, eventlog.Filter{}, []eventlog.SessionInfo{summary(a.id, messages.StatusRunning, want)})

	// Owning another partition fences nobody on partition 3.
	if lc := s.own(t, f, "node-c", 4); lc.Epoch <= lb.Epoch {
		t.Fatalf("Own of partition 4 returned epoch %d, not above partition 3's %d", lc.Epoch, lb.Epoch)
	}
	more := a.writer(t, 6, "node-b")
	s.appendLeased(t, f, lb, more)
	want = append(want, more)

	// Leases that were never current: a partition nobody took, an epoch not recorded.
	other := newSession("elsewhere", 2_000_000)
	s.appendLeasedErr(t, f, eventlog.Lease{Partition: 9, Epoch: lb.Epoch}, eventlog.ErrFenced, other.next(t, &messages.TaskSubmitted{Input: "x"}))
	s.appendLeasedErr(t, f, eventlog.Lease{Partition: 3, Epoch: lb.Epoch + 1000}, eventlog.ErrFenced, a.writer(t, 7, "nobody"))

	// Append without a lease writes under epoch 0: neither fenced nor hidden.
	plain := a.writer(t, 7, "embedded")
	s.append(t, l, plain)
	want = append(want, plain)
	s.wantRead(t, l, a.id, 0, want)
	s.wantRead(t, l, a.id, 6, want[5:])
	s.wantRead(t, l, other.id, 0, nil)
}

// testFencingEpochs: every Own returns an epoch above all before it, of any
// partition; one Own of several partitions gives them one lease epoch; bad
// arguments and a closed log are refused.
func (s *suite) testFencingEpochs(t *testing.T) {
	l := s.newLog(t)
	f := s.fencing(t, l)
	var last uint64
	for i, p := range []int{0, 7, 0, 7, 1} {
		lease := s.own(t, f, fmt.Sprintf("node-%d", i), p)
		if lease.Epoch <= last {
			t.Fatalf("Own #%d (partition %d) returned epoch %d, not above %d", i+1, p, lease.Epoch, last)
		}
		last = lease.Epoch
	}
	epoch, err := f.Own(s.ctx(t), "node-x", []int{2, 3})
	if err != nil || epoch <= last {
		t.Fatalf("Own(partitions 2 and 3) = %d, %v; want an epoch above %d", epoch, err, last)
	}
	for _, p := range []int{2, 3} {
		b := newSession(fmt.Sprintf("p%d", p), 1_000_000)
		e := b.next(t, &messages.TaskSubmitted{Input: "x"})
		s.appendLeased(t, f, eventlog.Lease{Partition: p, Epoch: epoch}, e)
		s.wantRead(t, l, b.id, 0, []messages.Envelope{e})
	}
	for _, bad := range []struct {
		node       string
		partitions []int
	}{{"", []int{1}}, {"node", nil}, {"node", []int{-1}}} {
		if _, err := f.Own(s.ctx(t), bad.node, bad.partitions); err == nil {
			t.Errorf("Own(%q, %v) succeeded, want an error", bad.node, bad.partitions)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Own(s.ctx(t), "late", []int{1}); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Own after Close = %v, want ErrClosed", err)
	}
	b := newSession("late", 1_000_000)
	s.appendLeasedErr(t, f, eventlog.Lease{Partition: 2, Epoch: epoch}, eventlog.ErrClosed, b.next(t, &messages.TaskSubmitted{Input: "x"}))
}

// testFencingConcurrentOwners: nodes that take one partition at the same moment
// (one of them evicted while it was being assigned) get distinct epochs, and only
// the highest one may append.
func (s *suite) testFencingConcurrentOwners(t *testing.T) {
	l := s.newLog(t)
	f := s.fencing(t, l)
	const owners = 6
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		epochs = make([]uint64, owners)
		errs   = make([]error, owners)
	)
	for i := range owners {
		wg.Go(func() {
			<-start
			epochs[i], errs[i] = f.Own(s.ctx(t), fmt.Sprintf("node-%d", i), []int{5})
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitDone(t, done, s.f.OpTimeout, "concurrent Own calls")
	top, seen := 0, map[uint64]int{}
	for i := range owners {
		if errs[i] != nil {
			t.Fatalf("Own #%d: %v", i, errs[i])
		}
		if j, ok := seen[epochs[i]]; ok {
			t.Fatalf("Own #%d and #%d both returned epoch %d", j, i, epochs[i])
		}
		seen[epochs[i]] = i
		if epochs[i] > epochs[top] {
			top = i
		}
	}
	a := newSession("contested", 1_000_000)
	for i := range owners {
		if i != top {
			s.appendLeasedErr(t, f, eventlog.Lease{Partition: 5, Epoch: epochs[i]}, eventlog.ErrFenced, a.writer(t, 1, fmt.Sprintf("node-%d", i)))
		}
	}
	winner := a.writer(t, 1, fmt.Sprintf("node-%d", top))
	s.appendLeased(t, f, eventlog.Lease{Partition: 5, Epoch: epochs[top]}, winner)
	s.wantRead(t, l, a.id, 0, []messages.Envelope{winner})
}

// testFencingHidesStaleWrites: the writes of a stale owner whose check passed just
// before the new owner took over (written here with Features.WriteStale) are not
// read: not at a seq the new owner wrote, nor past the last seq it wrote.
func (s *suite) testFencingHidesStaleWrites(t *testing.T) {
	if s.f.WriteStale == nil {
		t.Skip("no Features.WriteStale to write as a stale owner")
	}
	l := s.newLog(t)
	f := s.fencing(t, l)
	a := newSession("stale", 1_000_000)
	head := a.task(t, nil)[:3]
	la := s.own(t, f, "node-a", 2)
	s.appendLeased(t, f, la, head...)
	lb := s.own(t, f, "node-b", 2)
	mine := []messages.Envelope{a.writer(t, 4, "node-b"), a.writer(t, 5, "node-b")}
	s.appendLeased(t, f, lb, mine...)
	s.f.WriteStale(t, l, la.Epoch, []messages.Envelope{a.writer(t, 4, "node-a"), a.writer(t, 6, "node-a"), a.writer(t, 7, "node-a")})

	want := append(append([]messages.Envelope{}, head...), mine...)
	s.wantRead(t, l, a.id, 0, want)
	s.wantRead(t, l, a.id, 4, mine)
	s.wantRead(t, l, a.id, 5, mine[1:])
	s.wantRead(t, l, a.id, 6, nil)
	// Found by ID as Read returns them: the new owner's at seq 4, no stale one past it.
	s.wantFind(t, l, a.id, mine[0].ID, &mine[0])
	s.wantFind(t, l, a.id, a.writer(t, 6, "node-a").ID, nil)
	// The stale owner stays fenced, the new owner appends as before.
	s.appendLeasedErr(t, f, la, eventlog.ErrFenced, a.writer(t, 8, "node-a"))
	s.appendLeased(t, f, lb, mine...)
	s.wantRead(t, l, a.id, 0, want)
}

// testFencingStaleWriteFirst: a stale owner's writes that land before the new owner
// writes at their seqs do not conflict with the new owner's events there, nor does
// a stale event's ID when the new owner appends that event at another seq; Read
// returns the new owner's events.
func (s *suite) testFencingStaleWriteFirst(t *testing.T) {
	if s.f.WriteStale == nil {
		t.Skip("no Features.WriteStale to write as a stale owner")
	}
	if s.f.FencingAtomic {
		t.Skip("the fencing check and the write are atomic (Features.FencingAtomic): a stale write never lands")
	}
	l := s.newLog(t)
	f := s.fencing(t, l)
	a := newSession("first", 1_000_000)
	head := a.task(t, nil)[:2]
	la := s.own(t, f, "node-a", 6)
	s.appendLeased(t, f, la, head...)
	lb := s.own(t, f, "node-b", 6) // node-b reads seqs 1 and 2
	// node-a's last batch lands now: seq 3, and a task (its ID is the bus message's)
	// at seq 4.
	task := a.event(t, 4, &messages.TaskSubmitted{Input: "redelivered"})
	task.ID = "task-msg-17"
	s.f.WriteStale(t, l, la.Epoch, []messages.Envelope{a.writer(t, 3, "node-a"), task})

	// node-b writes seqs 3 and 4, then gets the task (redelivered) and records it.
	mine := []messages.Envelope{a.writer(t, 3, "node-b"), a.writer(t, 4, "node-b")}
	s.appendLeased(t, f, lb, mine...)
	again := task
	again.Seq, again.TS = 5, task.TS+1000
	s.appendLeased(t, f, lb, again)
	want := append(append(append([]messages.Envelope{}, head...), mine...), again)
	s.wantRead(t, l, a.id, 0, want)
	s.wantRead(t, l, a.id, 4, want[3:])
	s.wantFind(t, l, a.id, task.ID, &again) // the new owner's, not the stale one at seq 4
	// Delivered again: no-ops. The stale owner stays fenced.
	s.appendLeased(t, f, lb, append(append([]messages.Envelope{}, mine...), again)...)
	s.appendLeasedErr(t, f, la, eventlog.ErrFenced, a.writer(t, 6, "node-a"))
	s.wantRead(t, l, a.id, 0, want)
	// A different event at a seq node-b wrote is still a conflict for node-b.
	s.appendLeasedErr(t, f, lb, eventlog.ErrSeqConflict, a.other(t, 4))
}

// testFencingCurrentEpoch: EpochReading's CurrentEpoch is the partition's latest
// Own (0 before any), whatever other partitions' owners take, so that a node can
// tell, as a session starts, that another node took its partition.
func (s *suite) testFencingCurrentEpoch(t *testing.T) {
	l := s.newLog(t)
	f := s.fencing(t, l)
	r, ok := l.(eventlog.EpochReading)
	if !ok {
		t.Skipf("%T does not implement eventlog.EpochReading", l)
	}
	want := func(p int, epoch uint64) {
		t.Helper()
		got, err := r.CurrentEpoch(s.ctx(t), p)
		if err != nil || got != epoch {
			t.Fatalf("CurrentEpoch(partition %d) = %d, %v; want %d", p, got, err, epoch)
		}
	}
	want(3, 0)
	first := s.own(t, f, "node-a", 3)
	want(3, first.Epoch)
	other := s.own(t, f, "node-b", 4) // a higher epoch, of another partition
	want(3, first.Epoch)
	want(4, other.Epoch)
	second := s.own(t, f, "node-b", 3)
	want(3, second.Epoch)
	if second.Epoch <= first.Epoch {
		t.Fatalf("second Own of partition 3 took epoch %d, not above %d", second.Epoch, first.Epoch)
	}
	if _, err := r.CurrentEpoch(s.ctx(t), -1); err == nil {
		t.Error("CurrentEpoch(-1) succeeded, want an error")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CurrentEpoch(s.ctx(t), 3); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("CurrentEpoch after Close = %v, want ErrClosed", err)
	}
}
