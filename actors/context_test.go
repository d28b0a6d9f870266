package actors_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

// runLongTask drives a task of steps model calls through the state alone: each
// step calls the lookup tool, whose result is long, and the last answers. It
// returns the recorded events and, for each model call, the request the session
// would send (built after its ModelRequested was applied, as the session does) and
// the decided event.
func runLongTask(t *testing.T, agent actors.Agent, st *actors.SessionState, seq uint64, task string, steps int, events *[]messages.Envelope) (uint64, []llm.Request, []*messages.ModelRequested) {
	t.Helper()
	var reqs []llm.Request
	var decided []*messages.ModelRequested
	apply := func(p messages.Payload, cause string) {
		t.Helper()
		seq++
		e := env(t, p, "s", seq, task)
		e.CausationID = cause
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		*events = append(*events, e)
	}
	apply(&messages.TaskSubmitted{Input: "Find out everything about topic " + task + ", step by step."}, "")
	for i := 0; ; i++ {
		d := st.Decide(agent, seq+1, 0)
		if d == nil {
			t.Fatalf("step %d: the agent waits on nothing", i)
		}
		switch p := d.Payload.(type) {
		case *messages.ModelRequested:
			apply(p, d.CausationID)
			reqs = append(reqs, st.Request(agent))
			decided = append(decided, p)
			msg := messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "lookup", Arguments: fmt.Sprintf(`{"page": %d}`, i)}}}
			if len(decided) == steps {
				msg = messages.ChatMessage{Role: messages.RoleAssistant, Content: "Here is what I found."}
			}
			apply(&messages.ModelResponded{Key: p.Key, Message: msg, Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 5}}, p.Key)
		case *messages.ToolCallRequested:
			apply(p, d.CausationID)
			var b strings.Builder
			for w := range 120 {
				fmt.Fprintf(&b, "fact %d-%d about %s; ", i, w, task)
			}
			apply(&messages.ToolCallCompleted{Key: p.Key, CallID: p.CallID, Tool: p.Tool, Result: b.String()}, p.Key)
		case *messages.TaskCompleted:
			apply(p, d.CausationID)
			return seq, reqs, decided
		default:
			t.Fatalf("step %d: decided %T %+v", i, p, p)
		}
	}
}

// TestLongConversationStaysWithinTheWindow runs two long tasks under a small
// window: every model call's context stays within its budget, its report is on
// the ModelRequested, the request the session sends is the one decided (same
// hash), the system message (system prompt and tool section) is byte-identical
// across all calls, no tool result travels without its call, and replay verify
// finds the session deterministic.
func TestLongConversationStaysWithinTheWindow(t *testing.T) {
	agent := actors.Agent{Model: "m", SystemPrompt: "You research topics with the lookup tool. " + strings.Repeat("Be precise. ", 20),
		Tools:    []messages.ToolSpec{{Name: "lookup", Description: "Looks a page up.", Parameters: []byte(`{"type":"object","properties":{"page":{"type":"integer"}}}`)}},
		MaxSteps: 50, LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff,
		Context: actors.ContextOptions{Window: 3000, ReservedOutput: 500}}
	st := actors.NewSessionState("s")
	var events []messages.Envelope
	seq, reqs1, dec1 := runLongTask(t, agent, st, 0, "a", 12, &events)
	_, reqs2, dec2 := runLongTask(t, agent, st, seq, "b", 20, &events) // past 64 messages in all
	reqs, decided := append(reqs1, reqs2...), append(dec1, dec2...)
	dropped := 0
	for i, mr := range decided {
		r := mr.Context
		if r == nil {
			t.Fatalf("call %d: no context report", i)
		}
		if r.Window != 3000 || r.Reserved != 500 || r.Budget != 3000-500-r.System || r.Used > r.Budget || r.Over != 0 {
			t.Fatalf("call %d: report %+v", i, r)
		}
		if r.Kept[0].ID != "system" || r.Kept[1].ID != "task" {
			t.Fatalf("call %d: kept %+v", i, r.Kept)
		}
		dropped += len(r.Dropped) + r.Older
		req := reqs[i]
		if llm.PromptHash(req) != mr.PromptHash || len(req.Messages) != mr.Messages {
			t.Fatalf("call %d: the request sent is not the one decided", i)
		}
		if req.Messages[0].Role != messages.RoleSystem || req.Messages[0].Content != reqs[0].Messages[0].Content {
			t.Fatalf("call %d: the system message changed:\n%q\n%q", i, req.Messages[0].Content, reqs[0].Messages[0].Content)
		}
		calls := map[string]bool{}
		for _, m := range req.Messages {
			for _, c := range m.ToolCalls {
				calls[c.ID] = true
			}
			if m.Role == messages.RoleTool && !calls[m.ToolCallID] {
				t.Fatalf("call %d: result of %s sent without its call", i, m.ToolCallID)
			}
		}
		// The task's input and the answer to the latest call are always there.
		if !strings.Contains(fmt.Sprint(req.Messages), "Find out everything about topic") {
			t.Fatalf("call %d: the task's input is missing", i)
		}
	}
	if dropped == 0 {
		t.Fatal("the window never bound: the test proves nothing")
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}

// TestContextDefaultsSendTheConversationAsItWas: under the default options a short
// conversation is sent whole, in order, after the system message.
func TestContextDefaultsSendTheConversationAsItWas(t *testing.T) {
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Tools: []messages.ToolSpec{{Name: "lookup"}}, MaxSteps: 50}
	st := actors.NewSessionState("s")
	var events []messages.Envelope
	_, reqs, _ := runLongTask(t, agent, st, 0, "a", 3, &events)
	last := reqs[len(reqs)-1].Messages
	if len(last) != 1+1+2+2 || last[0].Content != "Be brief." || last[1].Role != messages.RoleUser ||
		len(last[2].ToolCalls) != 1 || last[3].ToolCallID != last[2].ToolCalls[0].ID || len(last[4].ToolCalls) != 1 || last[5].ToolCallID != last[4].ToolCalls[0].ID {
		t.Fatalf("messages %+v", last)
	}
}

func TestContextOptionsValidate(t *testing.T) {
	for _, o := range []actors.ContextOptions{{}, {Window: 8000}, {Window: 8000, ReservedOutput: 7999}, {HistoryTurns: -1}, {HistoryTurns: 5}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []actors.ContextOptions{{Window: 10}, {Window: 4000}, {Window: 8000, ReservedOutput: 8000}, {ReservedOutput: -1}, {HistoryTurns: actors.MaxHistoryTurns + 1}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	// A window too small for the default reserved output is a matter of the
	// complete options: its reserved output may come from elsewhere.
	if err := (actors.ContextOptions{Window: 2000}).ValidateFields(); err != nil {
		t.Errorf("fields of a 2000-token window: %v", err)
	}
}

// A session recorded before requests carried a context report verifies on its
// prompts' hashes; a recorded report that differs from the one built now is a
// divergence.
func TestVerifyOldRecordingsWithoutReports(t *testing.T) {
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Tools: []messages.ToolSpec{{Name: "lookup"}}, MaxSteps: 50,
		Context: actors.ContextOptions{Window: 2000, ReservedOutput: 500}}
	var events []messages.Envelope
	runLongTask(t, agent, actors.NewSessionState("s"), 0, "a", 4, &events)
	rewrite := func(change func(*messages.ModelRequested)) []messages.Envelope {
		out := make([]messages.Envelope, len(events))
		for i, e := range events {
			out[i] = e
			if e.Type != messages.TypeModelRequested {
				continue
			}
			p, err := e.Decode()
			if err != nil {
				t.Fatal(err)
			}
			mr := *p.(*messages.ModelRequested)
			change(&mr)
			ne, err := messages.NewEnvelope(&mr)
			if err != nil {
				t.Fatal(err)
			}
			out[i].Payload = ne.Payload
		}
		return out
	}
	old := rewrite(func(mr *messages.ModelRequested) { mr.Context = nil })
	if strings.Contains(string(old[1].Payload), `"context"`) {
		t.Fatalf("the rewritten request still has a report: %s", old[1].Payload)
	}
	if div, err := actors.Verify(agent, old); err != nil || div != nil {
		t.Fatalf("verify of a recording without reports: %v %v", div, err)
	}
	changed := rewrite(func(mr *messages.ModelRequested) {
		r := *mr.Context
		r.Used++
		mr.Context = &r
	})
	if div, err := actors.Verify(agent, changed); err != nil || div == nil || !strings.Contains(div.Expected, `"context":{"window":2000`) {
		t.Fatalf("verify of a recording whose report differs: %v %v, want a divergence", div, err)
	}
}

// The check of an agent's prompt against its window counts the schemas of the
// tools its requests offer (name, description, parameters), as the context of a
// request does: a short prompt with many tools that fill the window is refused,
// naming the tools' share, and the same agent in a wider window is taken.
func TestCheckPromptFitsCountsToolSchemas(t *testing.T) {
	var specs []messages.ToolSpec
	for i := range 40 {
		specs = append(specs, messages.ToolSpec{Name: fmt.Sprintf("lookup_%02d", i),
			Description: "Looks up a record of the inventory by its identifier and returns its fields, its history and the records it refers to.",
			Parameters:  []byte(`{"type":"object","properties":{"id":{"type":"string","description":"the record's identifier"},"fields":{"type":"array","items":{"type":"string"}}},"required":["id"]}`)})
	}
	agent := actors.Agent{Name: "clerk", SystemPrompt: "You keep the inventory.", Tools: specs,
		Context: actors.ContextOptions{Window: 2000, ReservedOutput: 200}}
	err := agent.CheckPromptFits()
	if err == nil || !strings.Contains(err.Error(), "the schemas of the 40 tools it offers are") || !strings.Contains(err.Error(), "leaves no room for a task") {
		t.Fatalf("40 tools' schemas in a window of 2000 tokens: %v, want them refused", err)
	}
	agent.Context.Window = 32000
	if err := agent.CheckPromptFits(); err != nil {
		t.Fatalf("in a window of 32000 tokens: %v", err)
	}
	agent.Context.Window, agent.Tools = 2000, specs[:1]
	if err := agent.CheckPromptFits(); err != nil {
		t.Fatalf("one tool in a window of 2000 tokens: %v", err)
	}
}
