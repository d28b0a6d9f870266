package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	kgo "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/telemetry"
)

// A task written to troupe.tasks by a plain Kafka client with W3C traceparent and
// tracestate headers runs in the client's trace, and every span of it carries the
// client's tracestate (vendors' entries, which W3C Trace Context says to pass on).
// Before, the task kept its traceparent alone: the spans past submit_task lost the
// tracestate. A malformed traceparent, or a tracestate of hundreds of kilobytes,
// starts a trace of the node's own and the task runs.
func TestKafkaTaskKeepsTheClientsTraceState(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	k := newKafkaEnv(t)
	n := k.nodeWith(t, node.Config{Traces: telemetry.With(tp)})
	const traceID, parentID, state = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	prefix := "tracestate-" + time.Now().Format("150405.000000")
	good, bad, huge := prefix+"-good", prefix+"-bad", prefix+"-huge"
	header := func(k, v string) protocol.Header { return protocol.Header{Key: k, Value: []byte(v)} }
	k.produce(t,
		kgo.Message{Key: []byte(good), Headers: []protocol.Header{header("traceparent", "00-"+traceID+"-"+parentID+"-01"), header("tracestate", state)},
			Value: []byte(`{"input":"echo good"}`)},
		kgo.Message{Key: []byte(bad), Headers: []protocol.Header{header("traceparent", "00-zz-"+parentID+"-01"), header("tracestate", state)},
			Value: []byte(`{"input":"echo bad"}`)},
		kgo.Message{Key: []byte(huge), Headers: []protocol.Header{header("traceparent", "00-"+traceID+"-"+parentID+"-01"),
			header("tracestate", "k="+strings.Repeat("v", 300_000))}, Value: []byte(`{"input":"echo huge"}`)})
	res := waitResults(t, k, 60*time.Second, "the traced tasks' results", func(res map[string]messages.TaskResult) bool {
		_, a := res[good]
		_, b := res[bad]
		_, c := res[huge]
		return a && b && c
	})
	for _, s := range []string{good, bad, huge} {
		if r := res[s]; r.Status != messages.StatusCompleted {
			t.Errorf("task of %s: %+v", s, r)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	bySession := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		session := spanAttr(s, "gen_ai.conversation.id")
		bySession[session] = append(bySession[session], s)
	}
	if len(bySession[good]) < 3 {
		t.Fatalf("spans of the traced task: %d", len(bySession[good]))
	}
	for _, s := range bySession[good] {
		if s.SpanContext.TraceID().String() != traceID || s.SpanContext.TraceState().String() != state {
			t.Errorf("span %q in trace %s with tracestate %q, want %s with %q", s.Name, s.SpanContext.TraceID(), s.SpanContext.TraceState(), traceID, state)
		}
	}
	for _, session := range []string{bad, huge} {
		if len(bySession[session]) == 0 {
			t.Errorf("no spans of %s", session)
		}
		for _, s := range bySession[session] {
			if session == bad && s.SpanContext.TraceID().String() == traceID || s.SpanContext.TraceState().Len() != 0 {
				t.Errorf("span %q of %s in trace %s with tracestate of %d entries", s.Name, session, s.SpanContext.TraceID(), s.SpanContext.TraceState().Len())
			}
		}
	}
}
