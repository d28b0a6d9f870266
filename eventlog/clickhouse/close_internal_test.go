package clickhouse

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/troupe-run/troupe/messages"
)

// hangingConn is a recorder whose queries (hangQuery) or INSERTs (hangInsert)
// hang until their ctx ends, as on a connection the network forgot: no answer
// and no error ever come. Each hanging call says so on entered.
type hangingConn struct {
	*recorder
	hangQuery, hangInsert atomic.Bool
	entered               chan string
	inFlight              atomic.Int64 // hanging calls not returned yet
}

func (c *hangingConn) hang(ctx context.Context, what string) error {
	c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	c.entered <- what
	<-ctx.Done()
	return ctx.Err()
}

func (c *hangingConn) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	if c.hangQuery.Load() {
		return nil, c.hang(ctx, "query")
	}
	return c.recorder.Query(ctx, query, args...)
}

func (c *hangingConn) PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if c.hangInsert.Load() {
		return nil, c.hang(ctx, "insert")
	}
	return c.recorder.PrepareBatch(ctx, query, opts...)
}

// TestCloseStopsRepairOnHungConnection: an INSERT hangs on a connection the
// network forgot, its caller gives up, and the writer stops the attempt and
// starts completing in the background what it may have written (repairCut),
// whose lookup hangs on another forgotten connection. Nothing is buffered, so
// Close returns without waiting out its timeout on the repair, and without an
// error (no append was lost): it stops the repair, which the listings may miss,
// as after a crash.
func TestCloseStopsRepairOnHungConnection(t *testing.T) {
	conn := &hangingConn{recorder: &recorder{}, entered: make(chan string, 4)}
	// Nothing but a caller or Close cuts an attempt short.
	cfg := Config{Database: "hung", QueryTimeout: 10 * time.Minute, ResponseTimeout: 10 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}.WithDefaults()
	l := start(cfg, conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	await := func(want string) {
		t.Helper()
		select {
		case got := <-conn.entered:
			if got != want {
				t.Fatalf("hanging %s, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s hangs", want)
		}
	}

	conn.hangInsert.Store(true)
	callerCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	appended := make(chan error, 1)
	go func() {
		appended <- l.Append(callerCtx, []messages.Envelope{streamEvent(t, "s", 1, &messages.TaskSubmitted{Input: "x"})})
	}()
	await("insert")
	conn.hangQuery.Store(true) // the repair's lookup hangs too
	giveUp()
	if err := <-appended; !errors.Is(err, context.Canceled) {
		t.Fatalf("Append whose caller gave up = %v, want context.Canceled", err)
	}
	await("query")
	if n := l.Stats().Buffered; n != 0 {
		t.Fatalf("%d events buffered, want 0", n)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close with nothing buffered and a repair hanging: %v; want nil", err)
	}
	if n := conn.inFlight.Load(); n != 0 {
		t.Fatalf("%d hanging calls still running after Close", n)
	}
}

// TestNoRepairWithoutInsert: an attempt whose lookup hangs, on a connection the
// network forgot, is stopped once its caller gives up, before any INSERT was
// started: nothing was written, the caller is told so, and no repair looks the
// batch up (one more query that could hang).
func TestNoRepairWithoutInsert(t *testing.T) {
	conn := &hangingConn{recorder: &recorder{}, entered: make(chan string, 4)}
	cfg := Config{Database: "hung", QueryTimeout: 10 * time.Minute, ResponseTimeout: 10 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}.WithDefaults()
	l := start(cfg, conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn.hangQuery.Store(true)
	callerCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	appended := make(chan error, 1)
	go func() {
		appended <- l.Append(callerCtx, []messages.Envelope{streamEvent(t, "s", 1, &messages.TaskSubmitted{Input: "x"})})
	}()
	select {
	case got := <-conn.entered:
		if got != "query" {
			t.Fatalf("hanging %s, want the lookup's query", got)
		}
	case <-ctx.Done():
		t.Fatal("the lookup does not hang")
	}
	giveUp()
	if err := <-appended; !errors.Is(err, context.Canceled) {
		t.Fatalf("Append whose caller gave up = %v, want context.Canceled", err)
	}
	if err := l.Close(); err != nil { // waits for the writer and its repairs
		t.Fatal(err)
	}
	if n := len(conn.entered); n != 0 {
		t.Fatalf("%d more queries after the attempt was stopped (%s); want none", n, <-conn.entered)
	}
}
