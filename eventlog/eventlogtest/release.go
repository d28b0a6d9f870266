package eventlogtest

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The tests of eventlog.Releasing: an owner's clean release of its partitions,
// and its marks of what it published, are recorded at its epoch only, and read
// back with the partitions' latest owners.

// releasing returns l's Releasing (and Fencing), or skips the test for a log
// without them.
func (s *suite) releasing(t *testing.T, l eventlog.Log) (eventlog.Fencing, eventlog.Releasing) {
	t.Helper()
	f := s.fencing(t, l)
	r, ok := l.(eventlog.Releasing)
	if !ok {
		t.Skipf("%T does not implement eventlog.Releasing", l)
	}
	return f, r
}

func (s *suite) release(t *testing.T, r eventlog.Releasing, node string, epoch uint64, partitions []int, atUS int64) {
	t.Helper()
	if err := r.Release(s.ctx(t), node, epoch, partitions, atUS); err != nil {
		t.Fatalf("Release(%s, epoch %d, partitions %v): %v", node, epoch, partitions, err)
	}
}

// wantOwners checks Owners(partitions), polling up to Features.VisibilityTimeout.
func (s *suite) wantOwners(t *testing.T, r eventlog.Releasing, partitions []int, want map[int]eventlog.Ownership) {
	t.Helper()
	deadline := time.Now().Add(s.f.VisibilityTimeout)
	for {
		got, err := r.Owners(s.ctx(t), partitions)
		if err != nil {
			t.Fatalf("Owners(%v): %v", partitions, err)
		}
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Owners(%v) = %v, want %v", partitions, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testReleaseOwners: Owners returns each partition's latest owner record, with
// ReleasedUS once its owner released it at its epoch; a Release under an epoch
// that is not the partition's current one (a later owner took it), or by another
// node, changes nothing; the next Own makes the partition unreleased again.
func (s *suite) testReleaseOwners(t *testing.T) {
	l := s.newLog(t)
	f, r := s.releasing(t, l)
	s.wantOwners(t, r, []int{0, 1, 2}, map[int]eventlog.Ownership{})
	s.wantOwners(t, r, nil, map[int]eventlog.Ownership{})

	ea, err := f.Own(s.ctx(t), "node-a", []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	s.wantOwners(t, r, []int{0, 1, 2, 3}, map[int]eventlog.Ownership{
		0: {Node: "node-a", Epoch: ea}, 1: {Node: "node-a", Epoch: ea}, 2: {Node: "node-a", Epoch: ea},
	})
	// Another node's name, or an epoch the partitions were not taken at: nothing.
	s.release(t, r, "node-b", ea, []int{0}, 500)
	s.release(t, r, "node-a", ea+100, []int{0}, 500)
	s.wantOwners(t, r, []int{0}, map[int]eventlog.Ownership{0: {Node: "node-a", Epoch: ea}})

	s.release(t, r, "node-a", ea, []int{0, 1}, 1_000)
	s.release(t, r, "node-a", ea, []int{7}, 1_000) // nobody owns partition 7: nothing
	s.wantOwners(t, r, []int{0, 1, 2, 7}, map[int]eventlog.Ownership{
		0: {Node: "node-a", Epoch: ea, ReleasedUS: 1_000},
		1: {Node: "node-a", Epoch: ea, ReleasedUS: 1_000},
		2: {Node: "node-a", Epoch: ea},
	})

	// node-b takes partitions 1 and 2: its records, not released, are the latest.
	eb, err := f.Own(s.ctx(t), "node-b", []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	// node-a, evicted without knowing, releases partition 2 late: a stale epoch.
	s.release(t, r, "node-a", ea, []int{2}, 2_000)
	want := map[int]eventlog.Ownership{
		0: {Node: "node-a", Epoch: ea, ReleasedUS: 1_000},
		1: {Node: "node-b", Epoch: eb},
		2: {Node: "node-b", Epoch: eb},
	}
	s.wantOwners(t, r, []int{0, 1, 2}, want)

	// node-b releases partition 1, then takes it back (a rebalance that gives it
	// the partition again): not released at the new epoch.
	s.release(t, r, "node-b", eb, []int{1}, 3_000)
	want[1] = eventlog.Ownership{Node: "node-b", Epoch: eb, ReleasedUS: 3_000}
	s.wantOwners(t, r, []int{0, 1, 2}, want)
	eb2, err := f.Own(s.ctx(t), "node-b", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	want[1] = eventlog.Ownership{Node: "node-b", Epoch: eb2}
	s.wantOwners(t, r, []int{0, 1, 2}, want)
	s.release(t, r, "node-b", eb2, []int{1}, 4_000)
	s.release(t, r, "node-b", eb2, []int{1}, 4_000) // twice: harmless
	want[1] = eventlog.Ownership{Node: "node-b", Epoch: eb2, ReleasedUS: 4_000}
	s.wantOwners(t, r, []int{0, 1, 2}, want)
}

// testReleaseArguments: bad arguments are refused, naming what is wrong, and
// change nothing; a closed log refuses with ErrClosed.
func (s *suite) testReleaseArguments(t *testing.T) {
	l := s.newLog(t)
	f, r := s.releasing(t, l)
	epoch, err := f.Own(s.ctx(t), "node-a", []int{4})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		node       string
		epoch      uint64
		partitions []int
		atUS       int64
	}{
		{"", epoch, []int{4}, 1},
		{"node-a", 0, []int{4}, 1},
		{"node-a", epoch, nil, 1},
		{"node-a", epoch, []int{-1}, 1},
		{"node-a", epoch, []int{4}, 0},
		{"node-a", epoch, []int{4}, -5},
	} {
		if err := r.Release(s.ctx(t), bad.node, bad.epoch, bad.partitions, bad.atUS); err == nil {
			t.Errorf("Release(%q, %d, %v, %d) succeeded, want an error", bad.node, bad.epoch, bad.partitions, bad.atUS)
		}
	}
	if _, err := r.Owners(s.ctx(t), []int{4, -2}); err == nil {
		t.Error("Owners with a negative partition succeeded, want an error")
	}
	s.wantOwners(t, r, []int{4}, map[int]eventlog.Ownership{4: {Node: "node-a", Epoch: epoch}})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(s.ctx(t), "node-a", epoch, []int{4}, 1); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
	if _, err := r.Owners(s.ctx(t), []int{4}); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("Owners after Close = %v, want ErrClosed", err)
	}
}

func (s *suite) mark(t *testing.T, r eventlog.Releasing, node string, epoch uint64, partitions []int, throughUS int64) {
	t.Helper()
	if err := r.MarkPublished(s.ctx(t), node, epoch, partitions, throughUS); err != nil {
		t.Fatalf("MarkPublished(%s, epoch %d, partitions %v, %d): %v", node, epoch, partitions, throughUS, err)
	}
}

// testMarkPublished: Owners returns, with each partition's latest owner record,
// the greatest mark its owner made at its epoch (PublishedUS); a mark under an
// epoch that is not the partition's current one, or by another node, changes
// nothing; a lower mark does not lower it; a release is reported beside it and
// the next Own starts unmarked.
func (s *suite) testMarkPublished(t *testing.T) {
	l := s.newLog(t)
	f, r := s.releasing(t, l)
	ea, err := f.Own(s.ctx(t), "node-a", []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	s.mark(t, r, "node-a", ea, []int{0, 1}, 1_000)
	s.mark(t, r, "node-a", ea, []int{9}, 1_000) // nobody owns partition 9: nothing
	want := map[int]eventlog.Ownership{
		0: {Node: "node-a", Epoch: ea, PublishedUS: 1_000},
		1: {Node: "node-a", Epoch: ea, PublishedUS: 1_000},
		2: {Node: "node-a", Epoch: ea},
	}
	s.wantOwners(t, r, []int{0, 1, 2, 9}, want)

	// The greatest of several marks; a lower one (a retry that lands late) does
	// not lower it. Another node's name, or an epoch the partitions were not taken
	// at: nothing.
	s.mark(t, r, "node-a", ea, []int{0}, 3_000)
	s.mark(t, r, "node-a", ea, []int{0}, 2_000)
	s.mark(t, r, "node-b", ea, []int{1}, 9_000)
	s.mark(t, r, "node-a", ea+100, []int{1}, 9_000)
	want[0] = eventlog.Ownership{Node: "node-a", Epoch: ea, PublishedUS: 3_000}
	s.wantOwners(t, r, []int{0, 1, 2}, want)

	// node-b takes partition 1: its record, unmarked, is the latest; node-a,
	// evicted without knowing, marks it late under its stale epoch: nothing.
	eb, err := f.Own(s.ctx(t), "node-b", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	want[1] = eventlog.Ownership{Node: "node-b", Epoch: eb}
	s.wantOwners(t, r, []int{0, 1, 2}, want)
	s.mark(t, r, "node-a", ea, []int{1}, 5_000)
	s.wantOwners(t, r, []int{0, 1, 2}, want)
	s.mark(t, r, "node-b", eb, []int{1}, 4_000)
	want[1] = eventlog.Ownership{Node: "node-b", Epoch: eb, PublishedUS: 4_000}
	s.wantOwners(t, r, []int{0, 1, 2}, want)

	// A release is recorded beside the marks (a node reading Owners takes it
	// for the stronger: everything is published), and a mark after it is too.
	s.release(t, r, "node-a", ea, []int{0}, 6_000)
	s.mark(t, r, "node-a", ea, []int{0}, 7_000)
	want[0] = eventlog.Ownership{Node: "node-a", Epoch: ea, ReleasedUS: 6_000, PublishedUS: 7_000}
	s.wantOwners(t, r, []int{0, 1, 2}, want)

	// node-b takes partition 1 back at a new epoch: unmarked again.
	eb2, err := f.Own(s.ctx(t), "node-b", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	want[1] = eventlog.Ownership{Node: "node-b", Epoch: eb2}
	s.wantOwners(t, r, []int{0, 1, 2}, want)
}

// testMarkPublishedArguments: bad arguments are refused, naming what is wrong,
// and change nothing; a closed log refuses with ErrClosed.
func (s *suite) testMarkPublishedArguments(t *testing.T) {
	l := s.newLog(t)
	f, r := s.releasing(t, l)
	epoch, err := f.Own(s.ctx(t), "node-a", []int{4})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		node       string
		epoch      uint64
		partitions []int
		throughUS  int64
	}{
		{"", epoch, []int{4}, 1},
		{"node-a", 0, []int{4}, 1},
		{"node-a", epoch, nil, 1},
		{"node-a", epoch, []int{-1}, 1},
		{"node-a", epoch, []int{4}, 0},
		{"node-a", epoch, []int{4}, -5},
	} {
		if err := r.MarkPublished(s.ctx(t), bad.node, bad.epoch, bad.partitions, bad.throughUS); err == nil {
			t.Errorf("MarkPublished(%q, %d, %v, %d) succeeded, want an error", bad.node, bad.epoch, bad.partitions, bad.throughUS)
		}
	}
	s.wantOwners(t, r, []int{4}, map[int]eventlog.Ownership{4: {Node: "node-a", Epoch: epoch}})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkPublished(s.ctx(t), "node-a", epoch, []int{4}, 1); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("MarkPublished after Close = %v, want ErrClosed", err)
	}
}

// takeOver takes partitions for node with TakeOver, and returns the epoch and the
// owner records it superseded.
func (s *suite) takeOver(t *testing.T, r eventlog.Releasing, node string, partitions []int) (uint64, map[int]eventlog.Ownership) {
	t.Helper()
	epoch, previous, err := r.TakeOver(s.ctx(t), node, partitions)
	if err != nil {
		t.Fatalf("TakeOver(%s, partitions %v): %v", node, partitions, err)
	}
	if epoch == 0 {
		t.Fatalf("TakeOver(%s, partitions %v) returned epoch 0, which is Append's", node, partitions)
	}
	return epoch, previous
}

// testTakeOver: TakeOver is an Own that returns the owner records it superseded,
// with their releases and marks, and none for a partition nobody owned.
//
// The race it closes: node a reads Owners (partition 0 released cleanly by c),
// then node b, which believes it owns the partition too (evicted, or a takeover
// racing a rebalance), takes it, ends a session under its lease and dies without
// releasing; a then takes the partition. What it took it from is b, not
// released, not marked: b's session may be unpublished, so a must publish it
// again; the Owners it read before says the opposite.
func (s *suite) testTakeOver(t *testing.T) {
	l := s.newLog(t)
	f, r := s.releasing(t, l)

	ec, previous := s.takeOver(t, r, "node-c", []int{0, 1, 2})
	if len(previous) != 0 {
		t.Fatalf("TakeOver of partitions nobody owned returned previous owners %v, want none", previous)
	}
	s.release(t, r, "node-c", ec, []int{0, 1}, 1_000)
	s.mark(t, r, "node-c", ec, []int{2}, 900)
	stale := map[int]eventlog.Ownership{
		0: {Node: "node-c", Epoch: ec, ReleasedUS: 1_000},
		1: {Node: "node-c", Epoch: ec, ReleasedUS: 1_000},
		2: {Node: "node-c", Epoch: ec, PublishedUS: 900},
	}
	s.wantOwners(t, r, []int{0, 1, 2}, stale) // what node-a reads first

	// node-b takes partition 0 in between, and ends a session under its lease.
	lb := s.own(t, f, "node-b", 0)
	b := newSession("taken-between", 1_000_000)
	s.appendLeased(t, f, lb, b.task(t, completed())...)

	ea, previous := s.takeOver(t, r, "node-a", []int{0, 1, 2, 3})
	if ea <= lb.Epoch {
		t.Fatalf("TakeOver returned epoch %d, not above node-b's %d", ea, lb.Epoch)
	}
	want := map[int]eventlog.Ownership{
		0: {Node: "node-b", Epoch: lb.Epoch}, // not node-c's clean release
		1: stale[1],
		2: stale[2],
	}
	if !maps.Equal(previous, want) {
		t.Fatalf("TakeOver after node-b took partition 0 returned previous owners %v, want %v", previous, want)
	}
	// It owns the partitions like Own: node-b is fenced, and Owners reads node-a.
	s.appendLeasedErr(t, f, lb, eventlog.ErrFenced, b.next(t, &messages.TaskSubmitted{Input: "again", Agent: "default"}))
	s.wantOwners(t, r, []int{0, 1, 2, 3}, map[int]eventlog.Ownership{
		0: {Node: "node-a", Epoch: ea}, 1: {Node: "node-a", Epoch: ea}, 2: {Node: "node-a", Epoch: ea}, 3: {Node: "node-a", Epoch: ea},
	})

	// Taken again, by node-a itself after it released partition 1: its own
	// record, released.
	s.release(t, r, "node-a", ea, []int{1}, 2_000)
	_, previous = s.takeOver(t, r, "node-a", []int{1})
	if want := (map[int]eventlog.Ownership{1: {Node: "node-a", Epoch: ea, ReleasedUS: 2_000}}); !maps.Equal(previous, want) {
		t.Fatalf("TakeOver of a partition its taker released returned previous owners %v, want %v", previous, want)
	}
}

// testTakeOverArguments: bad arguments are refused as by Own, and take nothing;
// a closed log refuses with ErrClosed.
func (s *suite) testTakeOverArguments(t *testing.T) {
	l := s.newLog(t)
	_, r := s.releasing(t, l)
	for _, bad := range []struct {
		node       string
		partitions []int
	}{{"", []int{1}}, {"node-a", nil}, {"node-a", []int{1, -1}}} {
		if _, _, err := r.TakeOver(s.ctx(t), bad.node, bad.partitions); err == nil {
			t.Errorf("TakeOver(%q, %v) succeeded, want an error", bad.node, bad.partitions)
		}
	}
	s.wantOwners(t, r, []int{1}, map[int]eventlog.Ownership{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.TakeOver(s.ctx(t), "node-a", []int{1}); !errors.Is(err, eventlog.ErrClosed) {
		t.Errorf("TakeOver after Close = %v, want ErrClosed", err)
	}
}
