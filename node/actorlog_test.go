package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestDeadLettersAreDemotedAndCarryNoContent(t *testing.T) {
	var buf bytes.Buffer
	info := slog.New(deadLetters{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})})
	info.Info("[DeadLetter]", slog.Any("message", &struct{ Secret string }{"sk-live-123"}))
	info.Info("actor started")
	if out := buf.String(); strings.Contains(out, "DeadLetter") || !strings.Contains(out, "actor started") {
		t.Fatalf("at INFO: %q", out)
	}
	buf.Reset()
	debug := slog.New(deadLetters{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("system", "troupe")
	debug.Info("[DeadLetter]", slog.Any("message", &struct{ Secret string }{"sk-live-123"}))
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "message_type=") || strings.Contains(out, "sk-live-123") || !strings.Contains(out, "system=troupe") {
		t.Fatalf("at DEBUG: %q", out)
	}
}
