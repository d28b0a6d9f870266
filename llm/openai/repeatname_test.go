package openai_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// Some OpenAI-compatible servers send a tool call's id and name again with every
// piece of its arguments. The call keeps its name, not the name repeated ("getget",
// a tool the agent does not have), and so do the increments, whose names add up to
// the call's.
func TestStreamedToolCallNameSentWithEveryPiece(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(),
		openaitest.ToolCallChunk(0, "c1", "get", `{"a":`), openaitest.ToolCallChunk(0, "c1", "get", `1}`),
		openaitest.FinishChunk("tool_calls"), openaitest.Done)))
	ds, r, err := stream(t, newModel(t, srv))
	want := messages.ToolCall{ID: "c1", Name: "get", Arguments: `{"a":1}`}
	if err != nil || len(r.Message.ToolCalls) != 1 || r.Message.ToolCalls[0] != want {
		t.Fatalf("calls %+v, err %v: want %+v", r.Message.ToolCalls, err, want)
	}
	name := ""
	for _, d := range ds {
		name += d.ToolName
	}
	if name != "get" {
		t.Fatalf("the increments name the call %q: %+v", name, ds)
	}
}
