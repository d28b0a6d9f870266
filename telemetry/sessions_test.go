package telemetry_test

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/telemetry"
)

// history builds a session's events in order, as its actor would record them.
type history struct {
	t       *testing.T
	session string
	task    string
	seq     uint64
	events  []messages.Envelope
}

func (h *history) add(p messages.Payload) messages.Envelope {
	h.t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		h.t.Fatal(err)
	}
	h.seq++
	e.SessionID, e.Seq, e.ID = h.session, h.seq, h.session+"/"+string(rune('a'+h.seq))
	if _, ok := p.(*messages.TaskSubmitted); ok {
		h.task = e.ID
	}
	e.CorrelationID = h.task
	h.events = append(h.events, e)
	return e
}

func recorded(rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	m := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		m[s.Name()] = s
	}
	return m
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestSessionSpansOfAFailingTask: a tool that fails and a task that fails give spans
// with an error status; the model's span is named after the model that answered.
func TestSessionSpansOfAFailingTask(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := telemetry.NewSessions(tp.Tracer("t"), 0)
	h := &history{t: t, session: "s1"}
	h.add(&messages.TaskSubmitted{Input: "x", Agent: "planner"})
	h.add(&messages.ModelRequested{Key: "s1/2", Step: 1})
	h.add(&messages.ModelResponded{Key: "s1/2", Model: "gpt-x", Usage: messages.Usage{PromptTokens: 3, CompletionTokens: 4, CostUSD: 0.5},
		Message: messages.ChatMessage{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "fetch"}}}})
	h.add(&messages.ToolCallRequested{Key: "s1/4", CallID: "c1", Tool: "fetch", Step: 1})
	h.add(&messages.ApprovalRequested{Key: "s1/4", CallID: "c1", Tool: "fetch"})
	h.add(&messages.ApprovalResolved{Key: "s1/4", Approve: true, By: messages.ApprovedByHTTP})
	s.Observe("s1", h.events)
	if s.Open() != 1 {
		t.Fatalf("%d sessions open, want 1", s.Open())
	}
	h.events = nil
	h.add(&messages.ToolCallCompleted{Key: "s1/4", CallID: "c1", Tool: "fetch", Error: "connection refused"})
	h.add(&messages.TaskFailed{Reason: messages.ReasonModelError, Error: "gave up", Steps: 1, Usage: messages.Usage{PromptTokens: 3, CompletionTokens: 4}})
	s.Observe("s1", h.events)

	spans := recorded(rec)
	chat, tool, task := spans["chat gpt-x"], spans["execute_tool fetch"], spans["invoke_agent planner"]
	if chat == nil || tool == nil || task == nil || spans["step 1"] == nil {
		t.Fatalf("spans %v", spans)
	}
	if attr(chat, "troupe.cost_usd") != "0.5" || attr(chat, "gen_ai.response.finish_reasons") != `["tool_calls"]` || attr(chat, "gen_ai.usage.output_tokens") != "4" {
		t.Errorf("chat attributes %v", chat.Attributes())
	}
	if ev := tool.Events(); len(ev) != 2 || ev[0].Name != "approval.requested" || ev[1].Name != "approval.resolved" {
		t.Errorf("tool span events %+v, want the approval's request and answer", ev)
	}
	if tool.Status().Code != codes.Error || tool.Status().Description != "connection refused" {
		t.Errorf("tool status %+v", tool.Status())
	}
	if task.Status().Code != codes.Error || attr(task, "troupe.failure_reason") != messages.ReasonModelError {
		t.Errorf("task status %+v, attributes %v", task.Status(), task.Attributes())
	}
	if s.Open() != 0 {
		t.Errorf("%d sessions open after the task failed", s.Open())
	}
}

// TestSessionSpansBounded: past the bound, the least recently seen session's spans
// end (interrupted); Close ends the rest.
func TestSessionSpansBounded(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := telemetry.NewSessions(tp.Tracer("t"), 2)
	for _, id := range []string{"a", "b", "c"} {
		h := &history{t: t, session: id}
		h.add(&messages.TaskSubmitted{Input: "x", Agent: id})
		s.Observe(id, h.events)
	}
	if s.Open() != 2 {
		t.Fatalf("%d open, want the bound 2", s.Open())
	}
	ended := recorded(rec)
	if a := ended["invoke_agent a"]; a == nil || attr(a, "troupe.interrupted") != "true" || len(ended) != 1 {
		t.Fatalf("ended %v, want the oldest task's span, interrupted", ended)
	}
	s.Close()
	if s.Open() != 0 || len(rec.Ended()) != 3 {
		t.Fatalf("after Close: %d open, %d ended", s.Open(), len(rec.Ended()))
	}
}

// TestSpanNamesAreBoundedLabels: a tool name the model made up (any length, with
// newlines) and a provider's model name name their spans on one short line; the
// attributes keep them whole.
func TestSpanNamesAreBoundedLabels(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := telemetry.NewSessions(tp.Tracer("t"), 0)
	tool := "evil\n\x1b[31m" + strings.Repeat("x", 5000)
	model := strings.Repeat("m", 300)
	h := &history{t: t, session: "s1"}
	h.add(&messages.TaskSubmitted{Input: "x"})
	h.add(&messages.ModelRequested{Key: "s1/2", Step: 1})
	h.add(&messages.ModelResponded{Key: "s1/2", Model: model, Message: messages.ChatMessage{ToolCalls: []messages.ToolCall{{ID: "c1", Name: tool}}}})
	h.add(&messages.ToolCallRequested{Key: "s1/4", CallID: "c1", Tool: tool, Step: 1})
	h.add(&messages.ToolCallCompleted{Key: "s1/4", CallID: "c1", Tool: tool, Error: "unknown tool"})
	h.add(&messages.TaskFailed{Reason: messages.ReasonModelError, Error: "gave up", Steps: 1})
	s.Observe("s1", h.events)
	var names []string
	for _, sp := range rec.Ended() {
		names = append(names, sp.Name())
		if utf8.RuneCountInString(sp.Name()) > len("execute_tool ")+64+1 || strings.ContainsFunc(sp.Name(), unicode.IsControl) {
			t.Errorf("span name %q (%d runes): want one line of a bounded length", sp.Name(), utf8.RuneCountInString(sp.Name()))
		}
		if strings.HasPrefix(sp.Name(), "execute_tool ") && attr(sp, "gen_ai.tool.name") != tool {
			t.Errorf("the tool span's gen_ai.tool.name is %q, want the whole name", attr(sp, "gen_ai.tool.name"))
		}
	}
	if !slices.Contains(names, "execute_tool evil??[31m"+strings.Repeat("x", 54)+"…") || !slices.Contains(names, "chat "+strings.Repeat("m", 64)+"…") {
		t.Errorf("span names %q", names)
	}
}
