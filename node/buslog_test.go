package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
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
