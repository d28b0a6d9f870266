package actors_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

type wordyTool struct{ groupTool }

func (w wordyTool) Spec() messages.ToolSpec {
	return messages.ToolSpec{Name: w.name, Description: "Does " + w.name + ": " + strings.Repeat("a careful thing with many words, ", 8),
		Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","description":"what to look at"}}}`)}
}

// An agent whose first request fits its window (CheckPromptFits) loads, under the
// catalog disclosure, a group whose schemas alone are larger than the window. The
// next request is built anyway: the stable prefix is outside the budget, the budget
// is 0, the task's input is cut to its marker, and the prompt sent is over the
// window, which a provider refuses (context_length_exceeded) and the offline model
// answers without having read the task. Nothing tells the model, or the user, that
// the load did not fit: load_tools answers "these tools are in your tool list now",
// and the report's Over is only printed by replay show.
//
// Wanted: a clear error — load_tools refusing a group that does not fit what is
// left of the window, or the task failing with a reason that names the tools'
// tokens — never a request over the window. Either changes what a session decides
// (a recorded result, or a task's end), so it is reported, not fixed here.
func TestLoadedGroupLargerThanTheWindowIsNotSentSilently(t *testing.T) {
	for _, rules := range []int{actors.ContextRules, 8} {
		loadedGroupLargerThanTheWindow(t, rules)
	}
}

func loadedGroupLargerThanTheWindow(t *testing.T, rules int) {
	var big []tools.Tool
	for i := range 60 {
		big = append(big, wordyTool{groupTool{fmt.Sprintf("big_%02d", i), "mcp:big"}})
	}
	d, err := disclosure.New(disclosure.Catalog, append([]tools.Tool{tools.Calculator{}}, big...))
	if err != nil {
		t.Fatal(err)
	}
	// No summaries: from rules 2 a prompt that is cut first asks a summary model to
	// condense what was cut (compress.go), a call of its own before this one.
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Disclosure: d,
		Context: actors.ContextOptions{Window: 2000, ReservedOutput: 200, Compression: actors.Compression{Model: actors.NoSummaryModel}}}
	for _, tl := range d.Tools() {
		agent.Tools = append(agent.Tools, tl.Spec())
	}
	if err := agent.CheckPromptFits(); err != nil {
		t.Fatalf("the first request should fit: %v", err)
	}
	st := actors.NewSessionState("s")
	seq := uint64(0)
	apply := func(p messages.Payload) {
		t.Helper()
		seq++
		if err := st.Apply(env(t, p, "s", seq, "task-1")); err != nil {
			t.Fatal(err)
		}
	}
	task := "What is 12 * (7 + 5)? Answer with the number."
	apply(&messages.TaskSubmitted{Input: task, Rules: rules})
	mr := st.Decide(agent, seq+1, 0).Payload.(*messages.ModelRequested)
	apply(mr)
	apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: actors.ToolLoadTools, Arguments: `{"group":"mcp:big"}`}}}})
	call := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
	apply(call)
	var names []string
	for _, b := range big {
		names = append(names, b.Spec().Name)
	}
	res, _ := json.Marshal(map[string]any{"group": "mcp:big", "loaded": names, "note": "these tools are in your tool list now"})
	apply(&messages.ToolCallCompleted{Key: call.Key, CallID: call.CallID, Tool: call.Tool, Result: string(res)})

	dec := st.Decide(agent, seq+1, 0)
	next, ok := dec.Payload.(*messages.ModelRequested)
	if rules < 9 {
		if !ok || next.Context.System <= next.Context.Window {
			t.Fatalf("under rules %d the request over the window is sent: %T", rules, dec.Payload)
		}
		return
	}
	if f, failed := dec.Payload.(*messages.TaskFailed); failed {
		if f.Reason != messages.ReasonContextOverflow || !strings.Contains(f.Error, "of which 6154 are the system prompt and the tools' schemas, in a window of 2000") {
			t.Fatalf("failure %+v", f)
		}
		return
	}
	if !ok {
		t.Fatalf("the session decided %T", dec.Payload)
	}
	r := next.Context
	req := st.Request(agent)
	specs, _ := json.Marshal(req.Tools)
	taskSent := false
	for _, m := range req.Messages {
		taskSent = taskSent || m.Content == task
	}
	if r.Over > 0 || r.System > r.Window-r.Reserved || !taskSent {
		t.Fatalf("a request over the window was decided: system %d tokens (%d bytes of schemas, %d tools), window %d less %d reserved, over by %d; the task's input sent whole: %v",
			r.System, len(specs), len(req.Tools), r.Window, r.Reserved, r.Over, taskSent)
	}
}

// A model's tool call whose arguments alone outgrow the window (a file written
// whole through the files tool, whose writes take up to max_bytes) is the latest
// move, pinned with its result: a cut shortens only a message's text, never a
// call's arguments (which would no longer be JSON), so the next request is over the
// window whatever is dropped or cut, and it is decided and sent, the task's input
// cut to its marker. Wanted: a clear end (the call's arguments named as what does
// not fit) rather than a request the provider refuses. Failing the task is a
// decision change: reported, not fixed here.
func TestPinnedCallLargerThanTheWindowIsNotSentSilently(t *testing.T) {
	for _, rules := range []int{actors.ContextRules, 8} {
		pinnedCallLargerThanTheWindow(t, rules)
	}
}

func pinnedCallLargerThanTheWindow(t *testing.T, rules int) {
	agent := actors.Agent{Model: "m", SystemPrompt: "Be brief.", Tools: []messages.ToolSpec{tools.Calculator{}.Spec()},
		Context: actors.ContextOptions{Window: 2000, ReservedOutput: 200}}
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
	args, _ := json.Marshal(map[string]string{"expression": strings.Repeat("1 + ", 3000) + "1"})
	apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: string(args)}}}})
	call := st.Decide(agent, seq+1, 0).Payload.(*messages.ToolCallRequested)
	apply(call)
	apply(&messages.ToolCallCompleted{Key: call.Key, CallID: call.CallID, Tool: call.Tool, Result: "3001"})
	dec := st.Decide(agent, seq+1, 0)
	next, ok := dec.Payload.(*messages.ModelRequested)
	if rules < 9 {
		if !ok || next.Context.Over == 0 {
			t.Fatalf("under rules %d the request over the window is sent: %T", rules, dec.Payload)
		}
		return
	}
	if f, failed := dec.Payload.(*messages.TaskFailed); failed {
		if f.Reason != messages.ReasonContextOverflow || !strings.Contains(f.Error, "does not fit the model's context window") || !strings.Contains(f.Error, "turn/") {
			t.Fatalf("failure %+v", f)
		}
		return
	}
	if !ok {
		t.Fatalf("the session decided %T", dec.Payload)
	}
	if r := next.Context; r.Over > 0 {
		t.Fatalf("a request over the window was decided: used %d of a budget of %d (window %d, %d reserved), over by %d",
			r.Used, r.Budget, r.Window, r.Reserved, r.Over)
	}
}
