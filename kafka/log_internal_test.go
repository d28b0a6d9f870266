package kafka

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

// levelLogger records what it is asked to write, and keeps the levels from min up.
type levelLogger struct {
	watermill.NopLogger
	min    watermill.LogLevel
	traces []string
	debugs []string
}

func (l *levelLogger) Enabled(level watermill.LogLevel) bool { return level >= l.min }
func (l *levelLogger) Trace(msg string, _ watermill.LogFields) {
	l.traces = append(l.traces, msg)
}
func (l *levelLogger) Debug(msg string, _ watermill.LogFields) {
	l.debugs = append(l.debugs, msg)
}

// formatted counts how often fmt formats it.
type formatted struct{ n *int }

func (f formatted) String() string { *f.n++; return "arg" }

// kafka-go's log lines are formatted only for a logger that keeps their level: not
// for one that says it does not, nor for watermill's NopLogger; other adapters,
// which cannot tell, get every line.
func TestKafkaGoLinesFormattedOnlyWhenKept(t *testing.T) {
	var n int
	arg := formatted{&n}
	l := &levelLogger{min: watermill.InfoLogLevel}
	traceLogger(l).Printf("fetch %v", arg)
	debugLogger(l).Printf("error %v", arg)
	if n != 0 || len(l.traces)+len(l.debugs) != 0 {
		t.Fatalf("with TRACE and DEBUG off: formatted %d times, logged %q %q", n, l.traces, l.debugs)
	}
	for _, nop := range []watermill.LoggerAdapter{watermill.NopLogger{}, &watermill.NopLogger{}} {
		traceLogger(nop).Printf("fetch %v", arg)
		debugLogger(nop).Printf("error %v", arg)
	}
	if n != 0 {
		t.Fatalf("a NopLogger's lines were formatted %d times", n)
	}
	l.min = watermill.DebugLogLevel
	traceLogger(l).Printf("fetch %v", arg)
	debugLogger(l).Printf("error %v", arg)
	if n != 1 || len(l.traces) != 0 || len(l.debugs) != 1 || l.debugs[0] != "kafka-go: error arg" {
		t.Fatalf("with DEBUG on: formatted %d times, logged %q %q", n, l.traces, l.debugs)
	}
	l.min = watermill.TraceLogLevel
	traceLogger(l).Printf("fetch %v", arg)
	if n != 2 || len(l.traces) != 1 || l.traces[0] != "kafka-go: fetch arg" {
		t.Fatalf("with TRACE on: formatted %d times, logged %q", n, l.traces)
	}
	capture := watermill.NewCaptureLogger()
	traceLogger(capture).Printf("fetch %v", arg)
	if n != 3 || !capture.Has(watermill.CapturedMessage{Level: watermill.TraceLogLevel, Msg: "kafka-go: fetch arg", Fields: watermill.LogFields{}}) {
		t.Fatalf("an adapter that cannot tell its levels: formatted %d times, captured %v", n, capture.Captured())
	}
}
