package react_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm/react"
)

// The replies of ReAct's own format (the paper's "Action: Finish[answer]", numbered
// "Action 1:" lines) are read as they mean, and a thought that says "finish [" in
// passing does not end the task when an action follows.
func TestParseReActFormatsOfThePaper(t *testing.T) {
	cases := map[string]struct{ tool, args, answer string }{
		"Thought: done\nAction: Finish[42]":                                         {answer: "42"},
		"Thought 1: compute\nAction 1: calculator[2+2]":                             {tool: "calculator", args: `{"expression":"2+2"}`},
		"Thought: I cannot finish [it] without computing.\nAction: calculator[2+2]": {tool: "calculator", args: `{"expression":"2+2"}`},
		// An observation and a Finish the model invents after its action are not read.
		"Thought: x\nAction: calculator[2+2]\nObservation: 4\nThought: so\nFinish[4]": {tool: "calculator", args: `{"expression":"2+2"}`},
		"Thought: done\nAction 2: finish[ 42 ]":                                       {answer: "42"},
	}
	for reply, want := range cases {
		msg, err := react.Parse(reply, tools, 3)
		if err != nil {
			t.Errorf("%q: %v", reply, err)
			continue
		}
		if want.answer != "" {
			if msg.Content != want.answer || len(msg.ToolCalls) != 0 {
				t.Errorf("%q: got %+v, want answer %q", reply, msg, want.answer)
			}
			continue
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Name != want.tool || msg.ToolCalls[0].Arguments != want.args {
			t.Errorf("%q: got %+v, want %s %s", reply, msg, want.tool, want.args)
		}
	}
}
