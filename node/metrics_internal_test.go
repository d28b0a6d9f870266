package node

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/troupe-run/troupe/messages"
)

// scanMembers reads what encoding/json writes: nested objects and arrays, strings
// with escaped quotes and braces, numbers and literals; it refuses what is not an
// object.
func TestScanMembers(t *testing.T) {
	obj := []byte(` { "a" : {"x":[1,{"y":"}"}]}, "b":"q\"}{","c":-12 ,"d":true,"e":null,"f":[] } `)
	var got []string
	if !scanMembers(obj, func(k, v []byte) { got = append(got, string(k)+"="+string(v)) }) {
		t.Fatal("a well-formed object refused")
	}
	want := []string{`a={"x":[1,{"y":"}"}]}`, `b="q\"}{"`, `c=-12`, `d=true`, `e=null`, `f=[]`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("members %q, want %q", got, want)
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":}`, `{"a":1`, `{"a":"x}`, `{"a":1 "b":2}`} {
		if scanMembers([]byte(bad), func(k, v []byte) {}) {
			t.Errorf("%q read as an object", bad)
		}
	}
	if n := jsonInt([]byte("-1234")); n != -1234 {
		t.Errorf("jsonInt(-1234) = %d", n)
	}
	if n := jsonInt([]byte("1.5")); n != 0 {
		t.Errorf("jsonInt(1.5) = %d, want 0", n)
	}
}

// skipString ends a string where a byte-by-byte scan does (each backslash
// skipping the byte after it), for every string of quotes, backslashes and
// letters up to 9 bytes long, from every start.
func TestSkipStringAsByteScan(t *testing.T) {
	byByte := func(b []byte, i int) int {
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return -1
	}
	alphabet := []byte{'"', '\\', 'a'}
	var each func(b []byte)
	each = func(b []byte) {
		for i := range b {
			if b[i] != '"' {
				continue
			}
			if got, want := skipString(b, i), byByte(b, i); got != want {
				t.Fatalf("skipString(%q, %d) = %d, want %d", b, i, got, want)
			}
		}
		if len(b) == 9 {
			return
		}
		for _, c := range alphabet {
			each(append(b, c))
		}
	}
	each(nil)
}

func envelope(t testing.TB, p messages.Payload, id, task string) messages.Envelope {
	t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		t.Fatal(err)
	}
	e.ID, e.CorrelationID = id, task
	return e
}

// A task's events, as a session appends them.
func taskEvents(t testing.TB, task, agent, tool string) []messages.Envelope {
	return []messages.Envelope{
		envelope(t, &messages.TaskSubmitted{Input: "hi", Agent: agent}, task, task),
		envelope(t, &messages.ModelRequested{Key: "k1", Model: "m", Step: 1}, task+"-1", task),
		envelope(t, &messages.ModelResponded{Key: "k1", Model: "m", Usage: messages.Usage{PromptTokens: 7, CompletionTokens: 3, CostUSD: 0.5}, LatencyUS: 2000,
			Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c", Name: tool, Arguments: `{"a":"}"}`}}}}, task+"-2", task),
		envelope(t, &messages.ToolCallCompleted{Key: "k2", CallID: "c", Tool: tool, Result: `{"r":1}`, LatencyUS: 1500}, task+"-3", task),
		envelope(t, &messages.ModelRequested{Key: "k3", Model: "m", Step: 2, Purpose: "critic"}, task+"-4", task),
		envelope(t, &messages.TaskFailed{Reason: messages.ReasonCancelled, Error: "cancelled"}, task+"-5", task),
	}
}

// Agent, model and tool names past the bound, and agents the node does not run,
// share the "other" series; the series of a name seen before cost no allocation.
func TestSessionMetricsBoundLabelsAndAllocateNothing(t *testing.T) {
	m := newSessionMetrics(prometheus.NewRegistry())
	m.agents.allowed = map[string]bool{"default": true, "helper": true}
	m.observe(taskEvents(t, "t0", "helper", "calc"))
	if v := valueOf(t, m.tasks.WithLabelValues("helper", "cancelled")); v != 1 {
		t.Fatalf("cancelled tasks of helper: %v, want 1", v)
	}
	if v := valueOf(t, m.steps.WithLabelValues("helper")); v != 1 {
		t.Fatalf("steps of helper: %v, want 1 (a call with a purpose is no step)", v)
	}
	if v := valueOf(t, m.cost.WithLabelValues("m")); v != 0.5 {
		t.Fatalf("cost: %v", v)
	}
	m.observe(taskEvents(t, "t1", "stranger", "calc"))
	if v := valueOf(t, m.tasks.WithLabelValues(otherLabel, "submitted")); v != 1 {
		t.Fatalf("a task of an agent the node does not run: %v under %q, want 1", v, otherLabel)
	}
	for i := range 2 * maxLabelValues {
		m.observe(taskEvents(t, fmt.Sprintf("x%d", i), "", fmt.Sprintf("tool-%d", i)))
	}
	if n := seriesOf(m.toolCall); n > 2*(maxLabelValues+1) {
		t.Fatalf("%d tool series after %d names, want at most %d", n, 2*maxLabelValues, 2*(maxLabelValues+1))
	}
	if v := valueOf(t, m.running.WithLabelValues("default")); v != 0 {
		t.Fatalf("running tasks after they all ended: %v", v)
	}
	events := taskEvents(t, "t2", "helper", "calc")
	if allocs := testing.AllocsPerRun(100, func() { m.observe(events) }); allocs > 0 {
		t.Errorf("observe allocates %v times per task of known names, want 0", allocs)
	}
}

// valueOf reads a counter's or a gauge's value.
func valueOf(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// seriesOf counts the series of a collector.
func seriesOf(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 1024)
	c.Collect(ch)
	close(ch)
	return len(ch)
}
