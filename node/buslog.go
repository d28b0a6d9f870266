package node

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// busLogger is the watermill.LoggerAdapter of a node's bus and router: watermill's
// slog adapter, called only for the levels the node's logger keeps. The adapter turns
// every record's fields into slog arguments before slog looks at the level, and
// GoChannel and the router log several TRACE and DEBUG records per message, so with
// the level off that was most of the allocations of a bus message.
type busLogger struct {
	watermill.LoggerAdapter
	handler slog.Handler
}

func newBusLogger(l *slog.Logger) watermill.LoggerAdapter {
	return busLogger{LoggerAdapter: watermill.NewSlogLogger(l), handler: l.Handler()}
}

// NewBusLogger returns the watermill.LoggerAdapter a node gives its bus: it writes to
// l, and builds a record only for the levels l keeps. Pass it to the Kafka clients
// (kafka.DialNode) too: it tells them which levels l keeps (Enabled, the optional
// kafka.LevelLogger), so that kafka-go's lines are formatted only when kept.
func NewBusLogger(l *slog.Logger) watermill.LoggerAdapter { return newBusLogger(l) }

// Enabled reports whether records of level are written now.
func (l busLogger) Enabled(level watermill.LogLevel) bool {
	switch level {
	case watermill.TraceLogLevel:
		return l.enabled(watermill.LevelTrace)
	case watermill.DebugLogLevel:
		return l.enabled(slog.LevelDebug)
	case watermill.InfoLogLevel:
		return l.enabled(slog.LevelInfo)
	}
	return l.enabled(slog.LevelError)
}

func (l busLogger) enabled(level slog.Level) bool {
	return l.handler.Enabled(context.Background(), level)
}

func (l busLogger) Error(msg string, err error, fields watermill.LogFields) {
	if l.enabled(slog.LevelError) {
		l.LoggerAdapter.Error(msg, err, fields)
	}
}

func (l busLogger) Info(msg string, fields watermill.LogFields) {
	if l.enabled(slog.LevelInfo) {
		l.LoggerAdapter.Info(msg, fields)
	}
}

func (l busLogger) Debug(msg string, fields watermill.LogFields) {
	if l.enabled(slog.LevelDebug) {
		l.LoggerAdapter.Debug(msg, fields)
	}
}

func (l busLogger) Trace(msg string, fields watermill.LogFields) {
	if l.enabled(watermill.LevelTrace) {
		l.LoggerAdapter.Trace(msg, fields)
	}
}

func (l busLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return busLogger{LoggerAdapter: l.LoggerAdapter.With(fields), handler: l.handler}
}
