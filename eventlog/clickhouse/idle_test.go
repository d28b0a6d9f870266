package clickhouse_test

import (
	"slices"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// TestForgottenIdleConnections: a Log whose connections sat idle and were then
// forgotten by the network on the way to ClickHouse (a NAT or a load balancer whose
// idle timer expired: the bytes sent on them vanish, and no RST ever comes) reads and
// appends as before, on new connections, instead of waiting out QueryTimeout on the
// dead ones and failing: a request sent on a connection after an idle spell must
// be answered within ResponseTimeout, and a read whose connection was found dead
// runs again on another.
func TestForgottenIdleConnections(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	// A query timeout far above the response timeout: waiting it out is the failure.
	l, _ := openLog(t, clickhouse.Config{Addr: []string{p.addr}, QueryTimeout: 20 * time.Second, ResponseTimeout: time.Second})
	ctx := testCtx(t, 2*time.Minute)
	const sessions = 4
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = "idle-" + string(rune('a'+i))
		if err := l.Append(ctx, []messages.Envelope{event(t, ids[i], 1), event(t, ids[i], 2)}); err != nil {
			t.Fatal(err)
		}
	}
	// Several connections in the pool: concurrent reads.
	readAll := func(want uint64) {
		t.Helper()
		errs := make(chan error, sessions)
		got := make([][]messages.Envelope, sessions)
		for i, id := range ids {
			go func() {
				var err error
				got[i], err = l.Read(ctx, id, 1)
				errs <- err
			}()
		}
		for range ids {
			if err := <-errs; err != nil {
				t.Fatalf("read after the network forgot the idle connections: %v", err)
			}
		}
		for i, evs := range got {
			var seqs []uint64
			for _, e := range evs {
				seqs = append(seqs, e.Seq)
			}
			if len(seqs) != int(want) || !slices.IsSorted(seqs) || seqs[len(seqs)-1] != want {
				t.Fatalf("session %s: seqs %v, want 1…%d", ids[i], seqs, want)
			}
		}
	}
	readAll(2)

	// Idle past the time a connection is trusted, then the network forgets them.
	time.Sleep(1500 * time.Millisecond)
	p.forget()
	readAll(2)
	for _, id := range ids {
		if err := l.Append(ctx, []messages.Envelope{event(t, id, 3)}); err != nil {
			t.Fatal(err)
		}
	}

	// Again, this time with an append first.
	time.Sleep(1500 * time.Millisecond)
	p.forget()
	for _, id := range ids {
		if err := l.Append(ctx, []messages.Envelope{event(t, id, 4)}); err != nil {
			t.Fatal(err)
		}
	}
	readAll(4)
	if p.vanished.Load() == 0 {
		t.Fatal("no byte was sent on a forgotten connection: the test proves nothing")
	}
	t.Logf("connections %d, %d bytes sent on forgotten ones vanished", p.accepted.Load(), p.vanished.Load())
}
