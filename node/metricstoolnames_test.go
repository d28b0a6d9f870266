package node_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// A model that calls tools the agent does not have (names it made up: many, long,
// with quotes and newlines) gives those calls no series of their own: they count
// under tool "other", and the node's own tools keep theirs. Before, the first 64
// names the node saw took the tool label's places for good, made-up ones included
// and of any length, and every later tool of the node counted as "other".
func TestMetricsMadeUpToolNamesTakeNoSeries(t *testing.T) {
	var madeUp []messages.ToolCall
	for i := range 70 {
		madeUp = append(madeUp, messages.ToolCall{ID: fmt.Sprintf("u%d", i), Name: fmt.Sprintf("no_such_tool_%d\"}\n# HELP x", i), Arguments: `{}`})
	}
	madeUp = append(madeUp, messages.ToolCall{ID: "huge", Name: strings.Repeat("x", 100_000), Arguments: `{}`})
	m, err := llm.NewScripted(llm.Script{Name: "metered", Steps: []llm.ScriptStep{
		{ToolCalls: madeUp},
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"6*7"}`}}},
		{Content: "42"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n := nodetest.Start(t, node.Config{Model: m})
	events := runAgentTask(t, n, node.Task{Input: "compute", SessionID: "made-up"})
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task ended with %s", last.Type)
	}
	fams := scrape(t, n)
	wantSample(t, fams, 1, "troupe_tool_call_seconds", "tool", "calculator", "outcome", "ok")
	wantSample(t, fams, float64(len(madeUp)), "troupe_tool_call_seconds", "tool", "other", "outcome", "error")
	for _, m := range fams["troupe_tool_call_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "tool" && l.GetValue() != "calculator" && l.GetValue() != "other" {
				t.Errorf("a series of tool %.80q", l.GetValue())
			}
		}
	}
}
