package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/messages"
)

// rowSpec is a row of the events table as a test writes it, bypassing the
// writer: several rows at one seq, rows of stale owners, and rows that
// fenced_events lists, as takeovers leave them.
type rowSpec struct {
	seq, epoch uint64
	id         string // "<session>/<seq>" if empty
	size       int    // of the payload's text
	fenced     bool   // fenced_events lists (seq, epoch)
}

// insertRows writes rows of session, one INSERT per group (an event written
// twice is two parts until they merge), into the events table and fenced_events.
func insertRows(t *testing.T, ctx context.Context, l *Log, session string, groups ...[]rowSpec) {
	t.Helper()
	for _, rows := range groups {
		b, err := l.conn.PrepareBatch(ctx, "INSERT INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch)")
		if err != nil {
			t.Fatal(err)
		}
		var fenced []rowSpec
		for _, r := range rows {
			id := r.id
			if id == "" {
				id = fmt.Sprintf("%s/%d", session, r.seq)
			}
			payload := fmt.Sprintf(`{"output":%q}`, strings.Repeat("x", r.size)+fmt.Sprintf(" epoch %d", r.epoch))
			if err := b.Append(session, r.seq, id, string(messages.TypeTaskCompleted), int64(1), "", session+"/1", int64(r.seq), "session", payload, r.epoch); err != nil {
				t.Fatal(err)
			}
			if r.fenced {
				fenced = append(fenced, r)
			}
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
		if len(fenced) == 0 {
			continue
		}
		fb, err := l.conn.PrepareBatch(ctx, "INSERT INTO fenced_events (session_id, seq, epoch, type, task, settled)")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range fenced {
			if err := fb.Append(session, r.seq, r.epoch, string(messages.TypeTaskCompleted), session+"/1", uint8(0)); err != nil {
				t.Fatal(err)
			}
		}
		if err := fb.Send(); err != nil {
			t.Fatal(err)
		}
	}
}

// cut is Read's events cut as a page of n events and maxBytes of payload is
// (eventlog.PageReader).
func cut(events []messages.Envelope, n, maxBytes int) []messages.Envelope {
	var (
		out   []messages.Envelope
		bytes int
	)
	for _, e := range events {
		out = append(out, e)
		bytes += len(e.Payload)
		if n > 0 && len(out) >= n || maxBytes > 0 && bytes >= maxBytes {
			break
		}
	}
	return out
}

// ReadN's pages are the slices of Read's events for every first seq, page size
// and byte bound, on sessions whose rows hold an event written twice, stale
// owners' events below a newer owner's at their seqs and after its events,
// events fenced_events lists that a later owner's events follow (Read returns
// them) and at the session's end (Read hides them, also when a hidden row of a
// stale owner follows them); and read page after page, they are Read's events.
func TestReadNPagesAreSlicesOfRead(t *testing.T) {
	addr, db := fencingDatabase(t, "readn")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests
	l := openNodes(t, ctx, addr, db, 1)[0]

	sizes := func(seq uint64) int { return int(seq*seq*37) % 2500 }
	var (
		mixA, mixB, mixC []rowSpec
	)
	for seq := uint64(1); seq <= 10; seq++ { // owner a, epoch 1
		mixA = append(mixA, rowSpec{seq: seq, epoch: 1, size: sizes(seq)})
	}
	mixA = append(mixA,
		rowSpec{seq: 11, epoch: 1, id: "a/11", size: 5}, // a's stale batch, landed after b took over
		rowSpec{seq: 12, epoch: 1, id: "a/12", size: 5},
		rowSpec{seq: 14, epoch: 1, id: "a/14", size: 5}, // hidden: epoch 1 after b's epoch 2
	)
	mixB = []rowSpec{
		{seq: 3, epoch: 1, size: sizes(3)}, // seq 3 written twice
		{seq: 11, epoch: 2, size: 40}, {seq: 12, epoch: 2, size: 41}, {seq: 13, epoch: 2, size: 42}, {seq: 14, epoch: 2, size: 43},
		// b's fenced batch, which c read before it wrote: Read returns it.
		{seq: 15, epoch: 2, size: 700, fenced: true}, {seq: 16, epoch: 2, size: 3, fenced: true},
	}
	for seq := uint64(17); seq <= 40; seq++ { // owner c, epoch 3
		mixC = append(mixC, rowSpec{seq: seq, epoch: 3, size: sizes(seq)})
	}
	mixC = append(mixC,
		rowSpec{seq: 25, epoch: 2, id: "b/25", size: 9, fenced: true}, // below c's at its seq
		// c's fenced tail, then a row of b's that Read hides: the tail stays hidden.
		rowSpec{seq: 41, epoch: 3, size: 100, fenced: true}, rowSpec{seq: 42, epoch: 3, size: 1200, fenced: true},
		rowSpec{seq: 43, epoch: 2, id: "b/43", size: 3},
	)
	insertRows(t, ctx, l, "mix", mixA, mixB, mixC)

	// A session of epoch 0 whose fenced rows sit between its events and at its
	// end, and one whose every event is fenced.
	var plain, allFenced []rowSpec
	for seq := uint64(1); seq <= 30; seq++ {
		plain = append(plain, rowSpec{seq: seq, size: sizes(seq + 5), fenced: seq%4 == 0 || seq >= 27})
	}
	for seq := uint64(1); seq <= 4; seq++ {
		allFenced = append(allFenced, rowSpec{seq: seq, epoch: 5, size: 10, fenced: true})
	}
	insertRows(t, ctx, l, "plain", plain)
	insertRows(t, ctx, l, "fenced", allFenced)

	for _, c := range []struct {
		session string
		last    uint64 // the session's last seq
		want    int    // events Read returns
	}{{"mix", 43, 40}, {"plain", 30, 26}, {"fenced", 4, 0}} {
		t.Run(c.session, func(t *testing.T) {
			t.Parallel()
			whole, err := l.Read(ctx, c.session, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(whole) != c.want {
				t.Fatalf("Read returns %d events, want %d: the rows are not what the test means", len(whole), c.want)
			}
			for from := uint64(1); from <= c.last+1; from++ {
				read, err := l.Read(ctx, c.session, from)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range []int{0, 1, 2, 3, 7} {
					for _, maxBytes := range []int{0, 1, 150, 3000} {
						if n == 0 && maxBytes == 0 {
							continue
						}
						got, err := l.ReadN(ctx, c.session, from, n, maxBytes)
						if err != nil {
							t.Fatal(err)
						}
						if want := cut(read, n, maxBytes); !reflect.DeepEqual(got, want) {
							t.Fatalf("ReadN(from %d, %d events, %d bytes) = seqs %v, want %v", from, n, maxBytes, seqs(got), seqs(want))
						}
					}
				}
			}
			for _, n := range []int{1, 2, 3, 7} {
				for _, maxBytes := range []int{0, 1, 3000} {
					var all []messages.Envelope
					for from := uint64(1); ; {
						page, err := l.ReadN(ctx, c.session, from, n, maxBytes)
						if err != nil {
							t.Fatal(err)
						}
						if len(page) == 0 {
							break
						}
						all = append(all, page...)
						from = page[len(page)-1].Seq + 1
					}
					if !reflect.DeepEqual(all, whole) {
						t.Errorf("read in pages of %d events and %d bytes: seqs %v, want Read's %v", n, maxBytes, seqs(all), seqs(whole))
					}
				}
			}
		})
	}
}

func seqs(events []messages.Envelope) []uint64 {
	out := make([]uint64, len(events))
	for i, e := range events {
		out[i] = e.Seq
	}
	return out
}

// rowCounting is a connection that records how many rows each read of a
// session's events (readColumns) returned, read or not, and their payload.
type rowCounting struct {
	driver.Conn
	mu      sync.Mutex
	queries []int // rows of each read
	bytes   []int // payload bytes of each read
}

func (c *rowCounting) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.Conn.Query(ctx, query, args...)
	if err != nil || !strings.Contains(query, "causation_id, correlation_id, ts, actor, payload") {
		return rows, err
	}
	return &countedRows{Rows: rows, c: c}, nil
}

// mostBytes returns the most payload bytes one read returned since the last
// call of most or mostBytes, and forgets the reads.
func (c *rowCounting) mostBytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	most := 0
	for _, n := range c.bytes {
		most = max(most, n)
	}
	c.queries, c.bytes = nil, nil
	return most
}

// Close leaves the connection to the Log that opened it.
func (c *rowCounting) Close() error { return nil }

// most returns the most rows one read returned, the rows of all of them, and
// how many reads ran, since the last call.
func (c *rowCounting) most() (most, rows, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.queries {
		most = max(most, n)
		rows += n
	}
	reads = len(c.queries)
	c.queries, c.bytes = nil, nil
	return most, rows, reads
}

type countedRows struct {
	driver.Rows
	c        *rowCounting
	n, bytes int
}

func (r *countedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.n++
		r.bytes += r.payload()
	}
	return ok
}

// payload returns the size of the current row's payload (readColumns' tenth
// column), scanned apart from the caller's Scan, which may follow.
func (r *countedRows) payload() int {
	var (
		seq, epoch                                      uint64
		id, typ, causation, correlation, actor, payload string
		version, ts                                     int64
		listed                                          uint8
	)
	if err := r.Rows.Scan(&seq, &epoch, &id, &typ, &version, &causation, &correlation, &ts, &actor, &payload, &listed); err != nil {
		return 0
	}
	return len(payload)
}

// Close counts the rows the caller left: clickhouse-go reads them too.
func (r *countedRows) Close() error {
	for r.Next() {
	}
	r.c.mu.Lock()
	r.c.queries = append(r.c.queries, r.n)
	r.c.bytes = append(r.c.bytes, r.bytes)
	r.c.mu.Unlock()
	return r.Rows.Close()
}

// A page of a long session reads about that page from ClickHouse, not the rest
// of the session: each query of ReadN returns a window of rows sized by the
// page, whether it is bounded by events or by bytes, and the pages read one
// after the other are Read's events. A page bounded by bytes is read mostly in
// one query, its window sized by the payload per row of the session's last
// page (rowSizes): each query reads whole granules.
func TestReadNReadsAWindowNotTheSession(t *testing.T) {
	addr, db := fencingDatabase(t, "readnwindow")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := openNodes(t, ctx, addr, db, 1)[0]
	const n = 3000
	var events []messages.Envelope
	for seq := uint64(1); seq <= n; seq++ {
		e := streamEvent(t, "long", seq, &messages.TaskSubmitted{Input: strings.Repeat("y", 1000+int(seq%7)*100)})
		events = append(events, e)
	}
	for i := 0; i < n; i += 500 {
		if err := w.Append(ctx, events[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	conn := &rowCounting{Conn: w.conn}
	l := start(w.cfg, conn)
	t.Cleanup(func() { _ = l.Close() })

	whole, err := l.Read(ctx, "long", 1)
	if err != nil || len(whole) != n {
		t.Fatalf("Read: %d events, %v; want %d", len(whole), err, n)
	}
	if most, _, _ := conn.most(); most != n {
		t.Fatalf("Read's query returned %d rows, want the session's %d", most, n)
	}
	for _, c := range []struct {
		n, maxBytes int
		mostRows    int // the most rows one query may return
	}{
		{100, 0, 100},
		{1000, 20 << 10, 64}, // about 20 events a page: the first window, 64 seqs, is the largest
		{0, 50 << 10, 64},
	} {
		var all []messages.Envelope
		pages := 0
		for from := uint64(1); ; pages++ {
			page, err := l.ReadN(ctx, "long", from, c.n, c.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			all = append(all, page...)
			from = page[len(page)-1].Seq + 1
		}
		most, rows, reads := conn.most()
		if !reflect.DeepEqual(all, whole) {
			t.Errorf("pages of %d events and %d bytes: %d events, not Read's %d", c.n, c.maxBytes, len(all), len(whole))
		}
		if most > c.mostRows {
			t.Errorf("pages of %d events and %d bytes: a query returned %d rows of the session's %d, want at most %d", c.n, c.maxBytes, most, n, c.mostRows)
		}
		if rows > 2*n {
			t.Errorf("pages of %d events and %d bytes: the queries returned %d rows of the session's %d; want about one window a page, each about the page", c.n, c.maxBytes, rows, n)
		}
		if reads > pages+pages/2+2 {
			t.Errorf("pages of %d events and %d bytes: %d queries for %d pages; want about one a page", c.n, c.maxBytes, reads, pages)
		}
	}
}

// Two events at one seq and epoch (two writers raced) are ErrCorrupt to a page
// that ends at that seq, as to Read: the page reads the rest of the seq's rows
// after the event that fills it, so that paging a session does not skip the
// second event and return the first as if it were the only one. A stale
// owner's event and an unmerged copy at the last seq of a page are no error.
func TestReadNReportsTwoEventsAtTheSeqThatEndsAPage(t *testing.T) {
	addr, db := fencingDatabase(t, "readncorrupt")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]
	insertRows(t, ctx, l, "raced",
		[]rowSpec{{seq: 1, epoch: 1, size: 1}, {seq: 2, epoch: 1, size: 1}, {seq: 3, epoch: 1, size: 1}},
		[]rowSpec{{seq: 2, epoch: 1, id: "other/2", size: 1}})
	insertRows(t, ctx, l, "kept",
		[]rowSpec{{seq: 1, epoch: 1, size: 1}, {seq: 2, epoch: 2, size: 1}, {seq: 3, epoch: 2, size: 1}},
		[]rowSpec{{seq: 2, epoch: 1, id: "stale/2", size: 1}, {seq: 2, epoch: 2, size: 1}, {seq: 3, epoch: 2, size: 1}})

	if _, err := l.Read(ctx, "raced", 1); !errors.Is(err, messages.ErrCorrupt) {
		t.Fatalf("Read: %v, want ErrCorrupt: the rows are not what the test means", err)
	}
	for _, c := range []struct {
		from        uint64
		n, maxBytes int
	}{{1, 2, 0}, {2, 1, 0}, {1, 0, 1 << 10}, {2, 0, 1}, {1, 2, 1 << 20}} {
		if page, err := l.ReadN(ctx, "raced", c.from, c.n, c.maxBytes); !errors.Is(err, messages.ErrCorrupt) {
			t.Errorf("ReadN(from %d, %d events, %d bytes) = seqs %v, %v; want ErrCorrupt", c.from, c.n, c.maxBytes, seqs(page), err)
		}
	}
	for from := uint64(1); ; {
		page, err := l.ReadN(ctx, "raced", from, 2, 0)
		if errors.Is(err, messages.ErrCorrupt) {
			break
		}
		if err != nil || len(page) == 0 {
			t.Fatalf("read in pages of 2 events from seq %d: %v, %v; want ErrCorrupt before the end", from, seqs(page), err)
		}
		from = page[len(page)-1].Seq + 1
	}

	whole, err := l.Read(ctx, "kept", 1)
	if err != nil || !reflect.DeepEqual(seqs(whole), []uint64{1, 2, 3}) {
		t.Fatalf("Read: seqs %v, %v; want 1 to 3", seqs(whole), err)
	}
	for from := uint64(1); from <= 3; from++ {
		for _, n := range []int{1, 2} {
			page, err := l.ReadN(ctx, "kept", from, n, 0)
			if want := cut(whole[from-1:], n, 0); err != nil || !reflect.DeepEqual(page, want) {
				t.Errorf("ReadN(from %d, %d events) = seqs %v, %v; want %v", from, n, seqs(page), err, seqs(want))
			}
		}
	}
}

// A page bounded by bytes transfers about that many bytes, whatever the sizes
// of the events before it: after a jump in the size of a session's events (a
// thousand events of a few bytes, then events of 200 KB), no query of a page
// returns more than the page's bound and the one event that crosses it, and
// the pages read one after the other are Read's events; also from parts
// written before schema 17, which compute payload_size from the payload.
func TestReadNBoundsTheBytesOfAPageAfterEventsGrow(t *testing.T) {
	addr, db := fencingDatabase(t, "readnjump")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w := openNodes(t, ctx, addr, db, 1)[0]
	const (
		small, large = 1100, 60
		largeSize    = 200 << 10
	)
	var events []messages.Envelope
	for seq := uint64(1); seq <= small+large; seq++ {
		input := "s"
		if seq > small {
			input = strings.Repeat("L", largeSize)
		}
		events = append(events, streamEvent(t, "jump", seq, &messages.TaskSubmitted{Input: input}))
	}
	for i := 0; i < len(events); i += 20 {
		if err := w.Append(ctx, events[i:min(i+20, len(events))]); err != nil {
			t.Fatal(err)
		}
	}
	conn := &rowCounting{Conn: w.conn}
	l := start(w.cfg, conn)
	t.Cleanup(func() { _ = l.Close() })
	whole, err := l.Read(ctx, "jump", 1)
	if err != nil || len(whole) != len(events) {
		t.Fatalf("Read: %d events, %v; want %d", len(whole), err, len(events))
	}
	biggest := 0
	for _, e := range whole {
		biggest = max(biggest, len(e.Payload))
	}
	check := func(stored string) {
		t.Helper()
		for _, maxBytes := range []int{64 << 10, 1 << 20} {
			conn.mostBytes()
			var all []messages.Envelope
			for from := uint64(1); ; {
				page, err := l.ReadN(ctx, "jump", from, 0, maxBytes)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				all = append(all, page...)
				from = page[len(page)-1].Seq + 1
			}
			if !reflect.DeepEqual(all, whole) {
				t.Errorf("%s: pages of %d bytes: %d events, not Read's %d", stored, maxBytes, len(all), len(whole))
			}
			if most := conn.mostBytes(); most > maxBytes+biggest {
				t.Errorf("%s: pages of %d bytes: a query transferred %d bytes of payload (%.1f pages); want at most the page and one event, %d",
					stored, maxBytes, most, float64(most)/float64(maxBytes), maxBytes+biggest)
			}
		}
	}
	check("payload_size stored")
	// As parts written before schema 17, which do not hold payload_size: it is
	// computed from the payload.
	for _, stmt := range []string{"ALTER TABLE events DROP COLUMN payload_size", "ALTER TABLE events ADD COLUMN payload_size UInt64 MATERIALIZED length(payload)"} {
		if err := w.conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	check("payload_size computed")
}

// A page whose pending fenced events reach its byte bound reads on, until an
// event Read returns follows them or the session ends, in windows that grow as
// the windows of a page that found no event do: a run of a stale owner's
// fenced events, or of its hidden ones, costs a few queries, not one a seq.
func TestReadNReadsARunOfFencedOrHiddenRowsInFewQueries(t *testing.T) {
	addr, db := fencingDatabase(t, "readnrun")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := openNodes(t, ctx, addr, db, 1)[0]
	const run = 300
	// fenced: two events of owner 1, then a batch of owner 1 that fenced_events
	// lists, then an event of owner 2 (Read returns the batch).
	// hidden: two events of owner 2, then rows of owner 1 that Read hides
	// (an epoch below that of an event before them), then one of owner 2.
	fenced := []rowSpec{{seq: 1, epoch: 1, size: 100}, {seq: 2, epoch: 1, size: 100}}
	hidden := []rowSpec{{seq: 1, epoch: 2, size: 100}, {seq: 2, epoch: 2, size: 100}}
	for seq := uint64(3); seq < 3+run; seq++ {
		fenced = append(fenced, rowSpec{seq: seq, epoch: 1, size: 100, fenced: true})
		hidden = append(hidden, rowSpec{seq: seq, epoch: 1, id: fmt.Sprintf("stale/%d", seq), size: 100})
	}
	fenced = append(fenced, rowSpec{seq: 3 + run, epoch: 2, size: 100})
	hidden = append(hidden, rowSpec{seq: 3 + run, epoch: 2, size: 100})
	insertRows(t, ctx, w, "fenced", fenced)
	insertRows(t, ctx, w, "hidden", hidden)
	conn := &rowCounting{Conn: w.conn}
	l := start(w.cfg, conn)
	t.Cleanup(func() { _ = l.Close() })
	for _, c := range []struct {
		session  string
		maxBytes int
		want     []uint64
	}{
		{"fenced", 250, []uint64{1, 2, 3}},       // the batch's first event fills the page
		{"hidden", 250, []uint64{1, 2, 3 + run}}, // the rows between are hidden
	} {
		conn.most()
		page, err := l.ReadN(ctx, c.session, 1, 0, c.maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		_, _, reads := conn.most()
		if !reflect.DeepEqual(seqs(page), c.want) {
			t.Errorf("%s: ReadN(from 1, %d bytes) = seqs %v, want %v", c.session, c.maxBytes, seqs(page), c.want)
		}
		if reads > 20 {
			t.Errorf("%s: ReadN(from 1, %d bytes) ran %d queries over a run of %d rows; want a few, the windows growing", c.session, c.maxBytes, reads, run)
		}
	}
}

// The window of a page bounded by bytes ends at the row whose payload reaches
// the bound, exactly at it or past it, and a page smaller than its first event
// holds that event: no query returns a row after it.
func TestReadNEndsItsWindowAtTheRowThatReachesTheBound(t *testing.T) {
	addr, db := fencingDatabase(t, "readnexact")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := openNodes(t, ctx, addr, db, 1)[0]
	var rows []rowSpec
	for seq := uint64(1); seq <= 6; seq++ {
		rows = append(rows, rowSpec{seq: seq, epoch: 1, size: 100})
	}
	insertRows(t, ctx, w, "exact", rows)
	conn := &rowCounting{Conn: w.conn}
	l := start(w.cfg, conn)
	t.Cleanup(func() { _ = l.Close() })
	whole, err := l.Read(ctx, "exact", 1)
	if err != nil || len(whole) != 6 {
		t.Fatalf("Read: %d events, %v; want 6", len(whole), err)
	}
	size := len(whole[0].Payload)
	for _, c := range []struct {
		maxBytes, want int
	}{{1, 1}, {size - 1, 1}, {size, 1}, {size + 1, 2}, {2 * size, 2}, {2*size + 1, 3}, {6 * size, 6}, {6*size + 1, 6}} {
		l.rowSizes.set("exact", 0) // the first window of 64 seqs, as for a session not read lately
		conn.most()
		page, err := l.ReadN(ctx, "exact", 1, 0, c.maxBytes)
		most, _, _ := conn.most()
		if err != nil || len(page) != c.want || most != c.want {
			t.Errorf("ReadN(from 1, %d bytes; events of %d) = %d events, %v, a query of %d rows; want %d events, no row after them",
				c.maxBytes, size, len(page), err, most, c.want)
		}
	}
}
