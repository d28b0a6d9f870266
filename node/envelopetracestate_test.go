package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/telemetry"
)

// A task.submitted envelope published whole on the tasks topic keeps the trace
// context of its payload (a node forwarding a task, or a client that traces), but
// only one W3C Trace Context reads: a tracestate that is malformed (a member
// without "=", an upper-case key, 33 members, hundreds of kilobytes) is left out
// of the recorded task, and a traceparent that is malformed is too, with its
// tracestate, so the task runs under the message's traceparent metadata as a plain
// task does. Before, both were recorded as they came: the log kept the bad
// tracestate (of any size) in every copy of the task, and a malformed traceparent
// in the payload cut the task off the trace its metadata named.
func TestBusEnvelopeKeepsOnlyAValidTraceContext(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	n := nodetest.Start(t, node.Config{Traces: telemetry.With(tp)})
	const (
		bodyTrace, headerTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
		bodyParent             = "00-" + bodyTrace + "-00f067aa0ba902b7-01"
		headerParent           = "00-" + headerTrace + "-b7ad6b7169203331-01"
		state                  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	)
	var many []string
	for i := range 33 {
		many = append(many, fmt.Sprintf("k%d=v", i))
	}
	for i, c := range []struct {
		parent, state          string
		wantTrace, wantState   string
		wantParentOfTheMessage bool
	}{
		{parent: bodyParent, state: state, wantTrace: bodyTrace, wantState: state},
		{parent: bodyParent, state: "congo=t61rcWkgMzE,,junk", wantTrace: bodyTrace},
		{parent: bodyParent, state: "Congo=t61", wantTrace: bodyTrace},
		{parent: bodyParent, state: strings.Join(many, ","), wantTrace: bodyTrace},
		{parent: bodyParent, state: "k=" + strings.Repeat("v", 300_000), wantTrace: bodyTrace},
		{parent: "00-zz-00f067aa0ba902b7-01", state: state, wantTrace: headerTrace},
		{parent: "not a traceparent", wantTrace: headerTrace},
	} {
		session := fmt.Sprintf("envelope-trace-%d", i)
		env, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "echo traced", TraceParent: c.parent, TraceState: c.state})
		if err != nil {
			t.Fatal(err)
		}
		env.ID, env.SessionID, env.TS, env.Actor = session+"-task", session, 1, "ingress"
		msg := message.NewMessage(env.ID, mustEnvelope(t, env))
		msg.Metadata.Set(telemetry.TraceParentKey, headerParent)
		live, stop := n.Watch(session)
		if err := n.Bus().Publish(messages.TopicTasks, msg); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(20 * time.Second)
	wait:
		for {
			select {
			case e := <-live:
				if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
					break wait
				}
			case <-timeout:
				t.Fatalf("session %s: the task did not finish in 20 s", session)
			}
		}
		stop()
		events, err := n.Log().Read(context.Background(), session, 1)
		if err != nil || len(events) == 0 || events[0].Type != messages.TypeTaskSubmitted {
			t.Fatalf("session %s: %d events, %v", session, len(events), err)
		}
		p, err := events[0].Decode()
		if err != nil {
			t.Fatal(err)
		}
		got := p.(*messages.TaskSubmitted)
		sc := telemetry.ParseTraceParent(got.TraceParent)
		if !sc.IsValid() || sc.TraceID().String() != c.wantTrace || got.TraceState != c.wantState {
			t.Errorf("traceparent %.40q, tracestate %.40q: recorded traceparent %q (trace %s), tracestate %.60q; want trace %s, tracestate %q",
				c.parent, c.state, got.TraceParent, sc.TraceID(), got.TraceState, c.wantTrace, c.wantState)
		}
	}
}
