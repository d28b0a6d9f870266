package clickhouse_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// A compaction whose caller gives up once its mutations were asked for (an
// upload's client that hung up while the write waited for them) still has the
// stream's summary written anew: the log does it in the background once the
// mutations are done, so that the listing counts the events left, not those
// deleted, without waiting for the stream's next compaction.
func TestDeleteEventsWhoseCallerGaveUpSettlesTheSummary(t *testing.T) {
	addr := serverAddr(t)
	l, db := openLog(t, clickhouse.Config{})
	conn := rawConn(t, addr)
	ctx := testCtx(t, 5*time.Minute)
	const stream = eventlog.KnowledgeStreamPrefix + "handbook"
	mutations := func() uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = 'events'", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var seq uint64
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatal("20 compactions ended before their caller gave up")
		}
		var events []messages.Envelope
		for range 40 {
			seq++
			events = append(events, event(t, stream, seq))
		}
		if err := l.Append(ctx, events); err != nil {
			t.Fatal(err)
		}
		var due []uint64
		for s := seq - 39; s < seq-1; s++ {
			due = append(due, s)
		}
		// The caller gives up as soon as the mutation of events is there.
		seen := mutations()
		dctx, giveUp := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for dctx.Err() == nil && mutations() == seen {
				time.Sleep(time.Millisecond)
			}
			giveUp()
		}()
		_, err := l.DeleteEvents(dctx, stream, due)
		giveUp()
		<-watched
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The deletion goes on in the server: count what it leaves.
	for {
		var left uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND is_done = 0", db).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var stored uint64
	if err := conn.QueryRow(ctx, "SELECT uniqExact(seq) FROM "+db+".events WHERE session_id = ?", stream).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored >= seq {
		t.Fatalf("%d events stored of %d: none deleted", stored, seq)
	}
	deadline := time.Now().Add(time.Minute) // a hang guard
	for {
		infos, err := l.Sessions(ctx, eventlog.Filter{Prefix: stream})
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) == 1 && infos[0].Events == int(stored) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the summary of the stream is %+v; want %d events, as stored", infos, stored)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
