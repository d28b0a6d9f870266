package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/messages"
)

// TestSessionReadsSkipOtherSessionsPayloads reads a small session stored after a
// large one, in the order of the key, and checks, by the bytes the server
// reports it read for each Read and ReadN, that no read decodes the large
// session's payloads. ClickHouse 18.16 selects by the primary key the last
// granule of every part whose rows sort before the session (it takes a part's
// last granule to reach to the end of the key), and, once the parts merge, the
// granule before the session's first: a WHERE on the key reads every column of
// those granules, a read of a few events 10 MB of another session's here.
// PREWHERE reads the key's columns first and the others only of the granules
// with rows of the session. The large session has a multiple of the granule's
// 1,024 rows, so that the bytes read are the same whether or not the two parts
// have merged.
func TestSessionReadsSkipOtherSessionsPayloads(t *testing.T) {
	addr, db := fencingDatabase(t, "prewhere")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]

	const bigRows, bigSize = 1024, 10_000
	big := make([]rowSpec, bigRows)
	for i := range big {
		big[i] = rowSpec{seq: uint64(i + 1), size: bigSize}
	}
	insertRows(t, ctx, l, "a-big", big)
	small := []rowSpec{{seq: 1, size: 40}, {seq: 2, size: 60}, {seq: 3, epoch: 1, size: 30, fenced: true}, {seq: 4, epoch: 1, size: 80},
		{seq: 5, epoch: 1, size: 20}, {seq: 6, epoch: 1, size: 50}}
	insertRows(t, ctx, l, "b-small", small)

	// read runs f with a context that sums the bytes the server reports its
	// queries read, and fails if they reach a tenth of the large session's
	// payload.
	read := func(name string, f func(ctx context.Context) ([]messages.Envelope, error)) []messages.Envelope {
		t.Helper()
		var bytes atomic.Uint64
		got, err := f(ch.Context(ctx, ch.WithProgress(func(p *ch.Progress) { bytes.Add(p.Bytes) })))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %d events, the server read %d bytes (the large session's payload: %d)", name, len(got), bytes.Load(), bigRows*bigSize)
		if bytes.Load() >= bigRows*bigSize/10 {
			t.Errorf("%s read %d bytes for %d events of session b-small: the payloads of session a-big (%d bytes) were read", name, bytes.Load(), len(got), bigRows*bigSize)
		}
		return got
	}
	var apart []messages.Envelope // Read's events before the parts merged
	for _, merged := range []bool{false, true} {
		if merged {
			if err := l.conn.Exec(ctx, "OPTIMIZE TABLE events FINAL"); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("parts merged: %v", merged)
		whole := read("Read", func(ctx context.Context) ([]messages.Envelope, error) { return l.Read(ctx, "b-small", 1) })
		if len(whole) != len(small) {
			t.Fatalf("Read returns %d events, want %d", len(whole), len(small))
		}
		if merged && !reflect.DeepEqual(whole, apart) {
			t.Fatalf("Read returns other events once the parts merged:\n%+v\nbefore:\n%+v", whole, apart)
		}
		apart = whole
		for _, c := range []struct {
			from        uint64
			n, maxBytes int
			want        []messages.Envelope
		}{
			{from: 4, want: whole[3:]},                             // readEpochQuery, then readQuery
			{from: 1, n: 2, want: whole[:2]},                       // readWindowQuery
			{from: 2, n: 3, want: whole[1:4]},                      // readEpochQuery, then readWindowQuery
			{from: 2, maxBytes: 150, want: cut(whole[1:], 0, 150)}, // readBytesWindowQuery
		} {
			name := fmt.Sprintf("ReadN(from %d, n %d, maxBytes %d)", c.from, c.n, c.maxBytes)
			got := read(name, func(ctx context.Context) ([]messages.Envelope, error) {
				return l.ReadN(ctx, "b-small", c.from, c.n, c.maxBytes)
			})
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s returns %d events, want %d (Read's):\n%+v\nwant\n%+v", name, len(got), len(c.want), got, c.want)
			}
		}
	}
}
