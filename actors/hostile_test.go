package actors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// A model's hostile reply: 200 calls in one answer, to tools that do not exist
// or whose names differ in case or whitespace, with arguments that are no JSON,
// an array, duplicate keys, megabytes or deep nesting, and call IDs used twice.
func TestHostileToolCallsReachTheModelAsErrors(t *testing.T) {
	echo := funcTool{"echo", func(ctx context.Context, c tools.Call) (string, error) {
		return fmt.Sprintf("%d bytes", len(c.Arguments)), nil
	}}
	var cs []messages.ToolCall
	hostile := []messages.ToolCall{
		{ID: "x", Name: "nope", Arguments: `{}`},
		{ID: "x", Name: "Echo", Arguments: `{}`},
		{ID: "y", Name: " echo ", Arguments: `{}`},
		{ID: "y", Name: "echo", Arguments: `not json`},
		{ID: "z", Name: "echo", Arguments: `[1,2]`},
		{ID: "z", Name: "echo", Arguments: `{"a":1,"a":2}`},
		{ID: "big", Name: "echo", Arguments: `{"a":"` + strings.Repeat("x", 2<<20) + `"}`},
		{ID: "deep", Name: "echo", Arguments: strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)},
	}
	cs = append(cs, hostile...)
	for i := len(cs); i < 200; i++ {
		cs = append(cs, messages.ToolCall{ID: fmt.Sprintf("c%d", i%50), Name: "echo", Arguments: fmt.Sprintf(`{"i":%d}`, i)})
	}
	// The megabytes of arguments in the history make the session condense it
	// first, with model calls of their own (steps 2 to 4 of the script).
	done := llm.ScriptStep{Content: "done"}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: script(t, calls(cs...), done, done, done, done, done), tools: []tools.Tool{echo}, maxSteps: 8,
		deps: func(d *actors.SessionDeps) { d.MaxParallelTools = 8; agent = d.Agent }})
	h.submit("s1", "task-1", "go")
	events := h.waitWithin("s1", 2*time.Minute) // megabytes of arguments to count, condense and record
	assertGapFree(t, events)
	if n := count(events, messages.TypeToolCallCompleted); n != 200 {
		t.Fatalf("%d tool results, want 200", n)
	}
	// The reply's calls are pinned in every later prompt, and a cut never shortens
	// arguments: under decision rules 9 to 15 the 2 MB refused as too long were
	// more than the window, and the task ended with context_overflow. From rules 16
	// a call refused for its arguments' length is kept with their head and tail,
	// and the model answers.
	last := events[len(events)-1]
	if last.Type != messages.TypeTaskCompleted {
		t.Fatalf("ended with %s", last.Type)
	}
	if c := decode[*messages.TaskCompleted](t, last); c.Output != "done" {
		t.Fatalf("completed with %+v", c)
	}
	errs := 0
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted && strings.HasPrefix(decode[*messages.ToolCallCompleted](t, e).Error, "unknown tool") {
			errs++
		}
	}
	if errs != 3 { // nope, Echo, " echo "
		t.Fatalf("%d calls answered as of an unknown tool, want 3", errs)
	}
	verifyDeterministic(t, agent, events)
}
