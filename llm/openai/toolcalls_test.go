package openai_test

import (
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A stream whose tool calls skip an index (0, then 2) is answered with the calls it
// made, in order: the hole is no call of the model's, and the answer (paid for) is
// not thrown away as malformed.
func TestStreamedToolCallsWithAnIndexGap(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(),
		openaitest.ToolCallChunk(0, "c1", "a", `{}`), openaitest.ToolCallChunk(2, "c3", "b", `{"x":1}`),
		openaitest.FinishChunk("tool_calls"), openaitest.Done)))
	_, r, err := stream(t, newModel(t, srv))
	want := []messages.ToolCall{{ID: "c1", Name: "a", Arguments: `{}`}, {ID: "c3", Name: "b", Arguments: `{"x":1}`}}
	if err != nil || len(r.Message.ToolCalls) != 2 || r.Message.ToolCalls[0] != want[0] || r.Message.ToolCalls[1] != want[1] {
		t.Fatalf("calls %+v, err %v: want %+v", r.Message.ToolCalls, err, want)
	}
}
