package sqlite_test

import (
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// ReadN reads a page of a session: at most n events from fromSeq on, in seq
// order; 0 reads them all, and a page past the end is empty. eventlog.ReadPage
// gives the same page of a log that is no PageReader (Read, cut).
func TestReadNReadsAPage(t *testing.T) {
	l := open(t, sqlite.Config{Dir: t.TempDir()})
	appendSeqs(t, l, "paged", 1, 50)
	type plain struct{ eventlog.Log } // Read only: not a PageReader
	for _, c := range []struct {
		from       uint64
		n          int
		first, len int
	}{
		{1, 10, 1, 10}, {10, 5, 10, 5}, {45, 10, 45, 6}, {51, 10, 0, 0}, {1, 0, 1, 50}, {20, 0, 20, 31},
	} {
		for _, log := range []eventlog.Log{l, plain{l}} {
			got, err := eventlog.ReadPage(t.Context(), log, "paged", c.from, c.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != c.len || c.len > 0 && (got[0].Seq != uint64(c.first) || got[len(got)-1].Seq != uint64(c.first+c.len-1)) {
				t.Errorf("%T: from %d, n %d: %d events, want %d from seq %d", log, c.from, c.n, len(got), c.len, c.first)
			}
		}
	}
}

// A page of a long session reads that page, not the rest: reading 10 events of
// 5,000 allocates a small fraction of what reading them all does (it read all of
// them, and cut, before ReadN).
func TestReadNStopsAtItsPage(t *testing.T) {
	l := open(t, sqlite.Config{Dir: t.TempDir()})
	appendSeqs(t, l, "long", 1, 5000)
	all := testing.AllocsPerRun(3, func() { _, _ = l.ReadN(t.Context(), "long", 1, 0, 0) })
	page := testing.AllocsPerRun(3, func() { _, _ = l.ReadN(t.Context(), "long", 1, 10, 0) })
	if page*50 > all {
		t.Fatalf("a page of 10 events allocated %.0f times, the whole session %.0f: want it under a fiftieth", page, all)
	}
}

// ReadN with a byte budget stops after the event that brings the payload read to
// it, and reads one event at least: a page of events of every size holds about
// the budget, however many events that is.
func TestReadNStopsAtItsByteBudget(t *testing.T) {
	l := open(t, sqlite.Config{Dir: t.TempDir()})
	appendSeqs(t, l, "sized", 1, 20) // events of several types and sizes
	all, err := l.ReadN(t.Context(), "sized", 1, 0, 0)
	if err != nil || len(all) != 20 {
		t.Fatalf("ReadN of all: %d events, %v", len(all), err)
	}
	upTo := func(k int) int { // the payload bytes of the first k events
		n := 0
		for _, e := range all[:k] {
			n += len(e.Payload)
		}
		return n
	}
	for _, c := range []struct{ n, maxBytes, want int }{
		{0, upTo(3), 3}, {0, upTo(3) - 1, 3}, {0, upTo(3) + 1, 4}, {2, upTo(3), 2}, {0, 1, 1}, {0, upTo(20) + 1, 20}, {5, 0, 5},
	} {
		got, err := l.ReadN(t.Context(), "sized", 1, c.n, c.maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.want {
			t.Errorf("ReadN(n %d, maxBytes %d): %d events, want %d", c.n, c.maxBytes, len(got), c.want)
		}
	}
}
