package react_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm/react"
)

// A JSON input reaches the tool as the model wrote it, compacted: an integer keeps
// its digits (9007199254740993 is not rounded to a float64's 9007199254740992), and
// a key written twice is left for the tool's argument check to refuse, not
// collapsed to one of its values unseen.
func TestJSONInputKeepsTheModelsText(t *testing.T) {
	for reply, want := range map[string]string{
		"Thought: x\nAction: search[{\"query\": \"id\", \"limit\": 9007199254740993}]":      `{"query":"id","limit":9007199254740993}`,
		"Thought: x\nAction: search\nAction Input: {\"limit\": 1, \"limit\": 2}":            `{"limit":1,"limit":2}`,
		"Thought: x\nAction: search[{\"query\": \"12345678901234567890\", \"limit\": 1e2}]": `{"query":"12345678901234567890","limit":1e2}`,
	} {
		msg, err := react.Parse(reply, tools, 1)
		if err != nil {
			t.Errorf("%q: %v", reply, err)
			continue
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Arguments != want {
			t.Errorf("%q: got %+v, want arguments %s", reply, msg.ToolCalls, want)
		}
	}
	if _, err := react.Parse("Thought: x\nAction: search[{\"query\": }]", tools, 1); err == nil {
		t.Error("invalid JSON was taken")
	}
}
