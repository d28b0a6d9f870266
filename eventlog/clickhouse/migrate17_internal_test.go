package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/messages"
)

// A log of schema 16 that holds events is brought to schema 17 by two nodes
// starting at once while a node of the build before (which never names
// payload_size) goes on appending: its appends all succeed, both new nodes
// open, every row's payload_size is its payload's length (computed for the
// parts written before, stored for those after), and pages bounded by bytes
// are Read's events cut, on the sessions written before, during and after.
func TestMigrationTo17WhileAnOlderNodeWrites(t *testing.T) {
	addr, db := fencingDatabase(t, "migr17")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw, err := ch.Open(&ch.Options{Addr: addr, Protocol: ch.Native})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	if err := raw.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: addr, Database: db}.WithDefaults()
	conn, err := ch.Open(options(cfg))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:16] {
		if err := apply(ctx, conn, m); err != nil {
			t.Fatal(err)
		}
		if err := record(ctx, conn, m); err != nil {
			t.Fatal(err)
		}
	}
	older := start(cfg, conn) // a node of schema 16, open before the upgrade
	t.Cleanup(func() { _ = older.Close(); _ = conn.Close() })

	session := func(i int) []messages.Envelope {
		id := fmt.Sprintf("old-%d", i)
		var out []messages.Envelope
		for seq := uint64(1); seq <= 8; seq++ {
			out = append(out, streamEvent(t, id, seq, &messages.TaskSubmitted{Input: strings.Repeat("z", 10+int(seq)*37*(i%5+1))}))
		}
		return out
	}
	var written atomic.Int64
	for i := range 5 { // before the upgrade
		if err := older.Append(ctx, session(i)); err != nil {
			t.Fatal(err)
		}
		written.Add(1)
	}
	const writers = 4 // a node's sessions append at once
	var (
		stop     = make(chan struct{})
		stopped  = make(chan struct{})
		next     atomic.Int64 // the next session to write
		writeErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	next.Store(5)
	for range writers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := int(next.Add(1) - 1)
				if err := older.Append(ctx, session(i)); err != nil {
					err = fmt.Errorf("append of session %d by the node of schema 16: %w", i, err)
					writeErr.Store(&err)
					return
				}
				written.Add(1)
			}
		})
	}
	go func() { wg.Wait(); close(stopped) }()
	logs := make([]*Log, 2)
	errs := make([]error, 2)
	var opens sync.WaitGroup
	for i := range logs {
		opens.Go(func() { logs[i], errs[i] = Open(ctx, Config{Addr: addr, Database: db}) })
	}
	opens.Wait()
	for i, l := range logs {
		if errs[i] != nil {
			t.Fatalf("Open #%d of a log of schema 16 being written: %v", i+1, errs[i])
		}
		t.Cleanup(func() { _ = l.Close() })
	}
	for at := written.Load(); written.Load() < at+5; { // appends after the upgrade
		select {
		case <-stopped:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	close(stop)
	<-stopped
	if err := writeErr.Load(); err != nil {
		t.Fatal(*err)
	}
	n := next.Load() // the sessions written are 0 to n-1
	var wrong, rows uint64
	if err := logs[0].conn.QueryRow(ctx, "SELECT countIf(payload_size != length(payload)), count() FROM events").Scan(&wrong, &rows); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 || rows != uint64(8*n) {
		t.Fatalf("%d of %d rows with a payload_size that is not their payload's length; want 0 of %d", wrong, rows, 8*n)
	}
	for i := range int(n) {
		id := fmt.Sprintf("old-%d", i)
		whole, err := logs[1].Read(ctx, id, 1)
		if err != nil || len(whole) != 8 {
			t.Fatalf("Read(%s) = %d events, %v; want 8", id, len(whole), err)
		}
		for _, maxBytes := range []int{1, 200, 1000} {
			for from := uint64(1); from <= 8; from++ {
				page, err := logs[1].ReadN(ctx, id, from, 0, maxBytes)
				if want := cut(whole[from-1:], 0, maxBytes); err != nil || !reflect.DeepEqual(page, want) {
					t.Fatalf("ReadN(%s from %d, %d bytes) = seqs %v, %v; want %v", id, from, maxBytes, seqs(page), err, seqs(want))
				}
			}
		}
	}
}
