package clickhouse_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// TestAbandonedAppendIsNotWaitedOut: an Append whose caller gave up while the
// writer was writing it, on a connection the network forgot (its bytes vanish,
// no error ever comes), does not keep the writer waiting out the query timeout:
// the writer stops the attempt, frees the batch's room in the buffer, and the
// next Append is written, on a new connection.
func TestAbandonedAppendIsNotWaitedOut(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	// Nothing but its caller cuts the attempt short: the timeouts are ten minutes.
	l, _ := openLog(t, clickhouse.Config{Addr: []string{p.addr}, QueryTimeout: 10 * time.Minute, ResponseTimeout: 10 * time.Minute})
	ctx := testCtx(t, 2*time.Minute)
	if err := l.Append(ctx, []messages.Envelope{event(t, "gone", 1)}); err != nil {
		t.Fatal(err)
	}
	p.forget()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Append(short, []messages.Envelope{event(t, "gone", 2)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append on a forgotten connection = %v, want its ctx's error", err)
	}
	// Each attempt that hangs on another forgotten connection of the pool is given
	// up with its caller too.
	var err error
	for range 10 {
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = l.Append(try, []messages.Envelope{event(t, "next", 1)})
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("Append after an abandoned one: %v (the writer waits out the abandoned attempt)", err)
	}
	if n := l.Stats().Buffered; n != 0 {
		t.Fatalf("%d events buffered after the appends returned, want 0", n)
	}
}
