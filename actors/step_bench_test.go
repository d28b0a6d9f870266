package actors

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// benchStepAgent is the embedded node's default agent as node.BenchmarkLoopNode runs
// it: a system prompt, two tools, and its own model for summaries.
func benchStepAgent() Agent {
	return Agent{Name: "default", Model: "bench",
		SystemPrompt: "You are a helpful agent running on Troupe. Use the tools when they help; answer concisely.",
		Tools: []messages.ToolSpec{
			{Name: "calculator", Description: "Evaluates an arithmetic expression exactly as written and returns the number.",
				Parameters: []byte(`{"type":"object","properties":{"expression":{"type":"string","description":"The expression to evaluate, e.g. \"12 * (7 + 5)\""}},"required":["expression"],"additionalProperties":false}`)},
			{Name: "clock", Description: "Returns the current date and time as RFC 3339 with the day of the week.",
				Parameters: []byte(`{"type":"object","properties":{"timezone":{"type":"string","description":"IANA time zone name"}},"additionalProperties":false}`)},
		}}
}

// BenchmarkSessionStateTask folds and decides one task of node.BenchmarkLoopNode's
// (the model calls the calculator, then answers) in a new session, as the session
// actor does: the state's share of a task's CPU, without the actor, bus or log.
//
//	go test ./actors -run '^$' -bench BenchmarkSessionStateTask -benchmem
func BenchmarkSessionStateTask(b *testing.B) {
	as := Agents{Default: benchStepAgent()}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		runStateTask(b, as, fmt.Sprintf("bench-%d", i))
	}
}

// runStateTask runs the task in a new session and returns the session's state.
func runStateTask(tb testing.TB, as Agents, id string) *SessionState {
	s := NewSessionState(id)
	now := int64(1_000_000)
	apply := func(p messages.Payload, cause, task string) messages.Envelope {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			tb.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.CausationID, e.CorrelationID, e.TS, e.Actor = s.keyAt(s.LastSeq+1), id, s.LastSeq+1, cause, task, now, "session"
		if err := s.applyEncoded(e, p); err != nil {
			tb.Fatal(err)
		}
		return e
	}
	decide := func() []messages.Envelope {
		var out []messages.Envelope
		for {
			d := s.DecideAmong(as, s.LastSeq+1, now)
			if d == nil {
				return out
			}
			out = append(out, apply(d.Payload, d.CausationID, d.TaskID))
		}
	}
	task, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: "What is 12 * (7 + 5)?"})
	if err != nil {
		tb.Fatal(err)
	}
	task.ID, task.SessionID, task.Seq, task.CorrelationID, task.TS = "task-"+id, id, 1, "task-"+id, now
	task, p := stampRules(task, nil, s)
	if err := s.applyEncoded(task, p); err != nil {
		tb.Fatal(err)
	}
	replies := []messages.ChatMessage{
		{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}},
		{Role: messages.RoleAssistant, Content: "144"},
	}
	for step := 0; ; step++ {
		evs := decide()
		if len(evs) == 0 {
			tb.Fatal("the task waits on nothing")
		}
		last := evs[len(evs)-1]
		switch last.Type {
		case messages.TypeTaskCompleted:
			return s
		case messages.TypeModelRequested:
			_ = s.Request(as.Default)
			key := s.pendingModelText()
			apply(&messages.ModelResponded{Key: key, Model: "bench", Message: replies[min(step, 1)]}, last.ID, task.ID)
		case messages.TypeToolCallRequested:
			pc := s.PendingCalls()
			if len(pc) != 1 {
				tb.Fatalf("pending calls %+v", pc)
			}
			apply(&messages.ToolCallCompleted{Key: pc[0].Request.Key, CallID: pc[0].Request.CallID, Tool: pc[0].Request.Tool, Result: "144"}, pc[0].EventID, task.ID)
		default:
			tb.Fatalf("decided %s", last.Type)
		}
	}
}
