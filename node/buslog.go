package node

import (
	"context"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
)

// busLogger is the watermill.LoggerAdapter of a node's bus and router: watermill's
// slog adapter, called only for the levels the node's logger keeps. The adapter turns
// every record's fields into slog arguments before slog looks at the level, and
// GoChannel and the router log several TRACE and DEBUG records per message, so with
// the level off that was most of the allocations of a bus message.
//
// A node's bus logger is shut when the node has closed (shut): watermill's router
// leaves a goroutine behind its Close that logs "Subscriber closed" once the
// subscriber has closed, and that record must not reach the node's logger after
// Node.Close returned, when its writer is the caller's again (a test reads it, a
// command returns it). Records logged while the logger shuts finish first.
type busLogger struct {
	watermill.LoggerAdapter
	handler slog.Handler
	shut    *logShutter // nil: never shut
}

// logShutter stops the records of the bus loggers that share it.
type logShutter struct {
	mu   sync.RWMutex
	shut bool
}

// close waits for the records being written, and drops all later ones.
func (s *logShutter) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.shut = true
	s.mu.Unlock()
}

// do runs log unless s is shut, holding s open while it runs.
func (s *logShutter) do(log func()) {
	if s == nil {
		log()
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.shut {
		log()
	}
}

func newBusLogger(l *slog.Logger, shut *logShutter) watermill.LoggerAdapter {
	return busLogger{LoggerAdapter: watermill.NewSlogLogger(l), handler: l.Handler(), shut: shut}
}

// NewBusLogger returns the watermill.LoggerAdapter a node gives its bus: it writes to
// l, and builds a record only for the levels l keeps. Pass it to the Kafka clients
// (kafka.DialNode) too: it tells them which levels l keeps (Enabled, the optional
// kafka.LevelLogger), so that kafka-go's lines are formatted only when kept.
func NewBusLogger(l *slog.Logger) watermill.LoggerAdapter { return newBusLogger(l, nil) }

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
		l.shut.do(func() { l.LoggerAdapter.Error(msg, err, fields) })
	}
}

func (l busLogger) Info(msg string, fields watermill.LogFields) {
	if l.enabled(slog.LevelInfo) {
		l.shut.do(func() { l.LoggerAdapter.Info(msg, fields) })
	}
}

func (l busLogger) Debug(msg string, fields watermill.LogFields) {
	if l.enabled(slog.LevelDebug) {
		l.shut.do(func() { l.LoggerAdapter.Debug(msg, fields) })
	}
}

func (l busLogger) Trace(msg string, fields watermill.LogFields) {
	if l.enabled(watermill.LevelTrace) {
		l.shut.do(func() { l.LoggerAdapter.Trace(msg, fields) })
	}
}

func (l busLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return busLogger{LoggerAdapter: l.LoggerAdapter.With(fields), handler: l.handler, shut: l.shut}
}
