package node

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/kafka"
)

// The bus logger drops the records of levels the node's logger does not keep before
// watermill's adapter builds their arguments, and passes the others on.
func TestBusLoggerSkipsDisabledLevels(t *testing.T) {
	var out bytes.Buffer
	l := newBusLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))).
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
