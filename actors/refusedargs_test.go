package actors_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A reply whose call's arguments (1 MiB and more) are refused as too long kept
// them whole in the conversation, where no cut shortens a call's arguments: the
// next request was larger than any window, and the task failed with
// context_overflow instead of letting the model try again shorter. From rules 17
// the conversation keeps their head and tail as a JSON object; the reply's event
// keeps them whole.
func TestRefusedLongArgumentsAreKeptCut(t *testing.T) {
	for _, rules := range []int{actors.ContextRules, 17, 16} {
		refusedLongArguments(t, rules)
	}
}

func refusedLongArguments(t *testing.T, rules int) {
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Tools: []messages.ToolSpec{tools.Calculator{}.Spec()},
		Context: actors.ContextOptions{Window: 8000, ReservedOutput: 500, Compression: actors.Compression{Model: actors.NoSummaryModel}}}
	st := actors.NewSessionState("s")
	seq := uint64(0)
	apply := func(p messages.Payload) {
		t.Helper()
		seq++
		if err := st.Apply(env(t, p, "s", seq, "task-1")); err != nil {
			t.Fatal(err)
		}
	}
	apply(&messages.TaskSubmitted{Input: "Compute it.", Rules: rules})
	mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	apply(mr)
	args, _ := json.Marshal(map[string]string{"expression": strings.Repeat("1 + ", 300000) + "1"})
	reply := &messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: string(args)}}}}
	apply(reply)
	call := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
	apply(call)
	_, err := tools.CallLimited(context.Background(), tools.Calculator{}, call.Tool, tools.Call{Key: call.Key, Arguments: call.Arguments})
	if err == nil {
		t.Fatal("1.2 MB of arguments were not refused")
	}
	apply(&messages.ToolCallCompleted{Key: call.Key, CallID: call.CallID, Tool: call.Tool, Error: err.Error()})
	if reply.Message.ToolCalls[0].Arguments != string(args) {
		t.Fatal("the reply's event lost its arguments")
	}
	dec := st.Decide(agent, seq+1, 0)
	if rules < 17 {
		if f, ok := dec.Payload.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonContextOverflow {
			t.Fatalf("under rules %d: %T %+v, want context_overflow as recorded", rules, dec.Payload, dec.Payload)
		}
		return
	}
	next, ok := dec.Payload.(*messages.ModelRequested)
	if !ok {
		t.Fatalf("under rules %d the session decided %T %+v, want the next model request", rules, dec.Payload, dec.Payload)
	}
	if r := next.Context; r.Over > 0 {
		t.Fatalf("the request is over the window by %d", r.Over)
	}
	var kept string
	for _, m := range st.Request(agent).Messages {
		for _, c := range m.ToolCalls {
			kept = c.Arguments
		}
	}
	var cut struct {
		Refused string `json:"refused_arguments"`
	}
	if err := json.Unmarshal([]byte(kept), &cut); err != nil || len(kept) > 2048 ||
		!strings.HasPrefix(cut.Refused, `{"expression":"1 + 1 + `) || !strings.HasSuffix(cut.Refused, `1 + 1"}`) || !strings.Contains(cut.Refused, "bytes of these arguments left out") {
		t.Fatalf("the call's arguments in the next request (%d bytes, %v): %.300s", len(kept), err, kept)
	}
}

// A session recorded under rules 17 is cut by its recorded error's text, whatever
// the tools of a later build say: this is the text of tools.CallLimited's and the
// ArgumentParser's refusal for length as this build records it, and a replay of
// such a session must cut the call as it was cut when it was recorded. A text
// that does not give the arguments' very length leaves them whole.
func TestRefusedArgumentsAreCutByTheirRecordedError(t *testing.T) {
	args, _ := json.Marshal(map[string]string{"expression": strings.Repeat("1 + ", 300000) + "1"}) // 1200018 bytes
	for _, tc := range []struct {
		recorded string
		cut      bool
	}{
		{"calculator: invalid arguments: the arguments are 1200018 bytes long; the limit is 1048576", true},
		{"offered_as: invalid arguments: the arguments are 1200018 bytes long; the limit is 65536", true},
		{"calculator: invalid arguments: the arguments are 1200017 bytes long; the limit is 1048576", false},
		{"calculator: invalid arguments: the arguments are 1200018 bytes long; the limit is 1048576 at position 3", false},
		{"calculator: the arguments are 1200018 bytes long; the limit is 1048576", false},
	} {
		agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Tools: []messages.ToolSpec{tools.Calculator{}.Spec()},
			Context: actors.ContextOptions{Window: 1 << 20, ReservedOutput: 500}}
		st := actors.NewSessionState("s")
		seq := uint64(0)
		apply := func(p messages.Payload) {
			t.Helper()
			seq++
			if err := st.Apply(env(t, p, "s", seq, "task-1")); err != nil {
				t.Fatal(err)
			}
		}
		apply(&messages.TaskSubmitted{Input: "Compute it.", Rules: 17})
		mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
		apply(mr)
		apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: string(args)}}}})
		call := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
		apply(call)
		apply(&messages.ToolCallCompleted{Key: call.Key, CallID: call.CallID, Tool: call.Tool, Error: tc.recorded})
		var kept string
		for _, m := range st.Request(agent).Messages {
			for _, c := range m.ToolCalls {
				kept = c.Arguments
			}
		}
		if cut := strings.HasPrefix(kept, `{"refused_arguments":`); cut != tc.cut || !cut && kept != string(args) {
			t.Errorf("recorded error %q: the call's arguments in the next request are %.80s (%d bytes), want cut %v", tc.recorded, kept, len(kept), tc.cut)
		}
	}
}
