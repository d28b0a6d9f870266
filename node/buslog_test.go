package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/kafka"
)

// The bus logger drops the records of levels the node's logger does not keep before
// watermill's adapter builds their arguments, and passes the others on.
func TestBusLoggerSkipsDisabledLevels(t *testing.T) {
	var out bytes.Buffer
	l := newBusLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})), nil).
		With(watermill.LogFields{"pubsub": "p1"})
	fields := watermill.LogFields{"message_uuid": "m1", "topic": "t"}
	allocs := testing.AllocsPerRun(100, func() {
		l.Trace("sending", fields)
		l.Debug("waiting", fields)
	})
	if allocs != 0 {
		t.Errorf("TRACE and DEBUG records below the logger's level cost %v allocations; want 0", allocs)
	}
	l.Info("published", fields)
	got := out.String()
	if strings.Contains(got, "sending") || strings.Contains(got, "waiting") {
		t.Errorf("records below INFO were written: %s", got)
	}
	if !strings.Contains(got, "published") || !strings.Contains(got, "message_uuid=m1") || !strings.Contains(got, "pubsub=p1") {
		t.Errorf("the INFO record with its fields is missing: %q", got)
	}
}

// The bus logger tells which levels it keeps, so that the Kafka clients format their
// lines only for those (kafka.LevelLogger).
func TestBusLoggerTellsItsLevels(t *testing.T) {
	l, ok := NewBusLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))).
		With(watermill.LogFields{"component": "c"}).(kafka.LevelLogger)
	if !ok {
		t.Fatal("the bus logger is no kafka.LevelLogger")
	}
	for level, want := range map[watermill.LogLevel]bool{watermill.TraceLogLevel: false, watermill.DebugLogLevel: false, watermill.InfoLogLevel: true, watermill.ErrorLogLevel: true} {
		if got := l.Enabled(level); got != want {
			t.Errorf("level %d: Enabled %v, want %v", level, got, want)
		}
	}
}

// After Close returns the node writes nothing more to its logger: the caller may read
// the logger's writer unlocked, or hand it on. Watermill's router leaves goroutines
// behind its Close that log "Subscriber closed" and "Subscriber stopped"; before the
// bus logger shut with the node, those records could land in the writer after Close
// (a data race under -race, on the buffer the caller read: cmd/node's
// TestEveryKeyVariableIsRedactedWhateverTheModel). The logger here holds those two
// records back a little, so that they come late every time.
func TestNodeLogsNothingAfterClose(t *testing.T) {
	var logs bytes.Buffer // unlocked: slog's handler serializes the node's own writes
	h := slowHandler{Handler: slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slow: func(msg string) bool { return strings.HasPrefix(msg, "Subscriber ") }}
	n, err := New(context.Background(), Config{DataDir: t.TempDir(), Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-n.Running():
	case err := <-done:
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	before := logs.Len()
	// Give what the node left running the time to log, were it to.
	time.Sleep(300 * time.Millisecond)
	if after := logs.Len(); after != before {
		t.Errorf("the node logged after Close returned: %q", logs.Bytes()[before:after])
	}
}

// slowHandler holds back the records slow picks before it passes them on.
type slowHandler struct {
	slog.Handler
	slow func(msg string) bool
}

func (h slowHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.slow(r.Message) {
		time.Sleep(100 * time.Millisecond)
	}
	return h.Handler.Handle(ctx, r)
}

func (h slowHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return slowHandler{Handler: h.Handler.WithAttrs(attrs), slow: h.slow}
}

func (h slowHandler) WithGroup(name string) slog.Handler {
	return slowHandler{Handler: h.Handler.WithGroup(name), slow: h.slow}
}
