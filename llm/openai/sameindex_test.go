package openai_test

import (
	"reflect"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// Some OpenAI-compatible servers stream parallel tool calls each whole in a chunk
// of its own, every one at index 0. A piece that brings another id than its index's
// call is another call: the answer has both, not one call named "ab" whose
// arguments are two objects end to end.
func TestStreamedParallelCallsAtOneIndex(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(),
		openaitest.ToolCallChunk(0, "c1", "a", `{"x":`), openaitest.ToolCallChunk(0, "", "", `1}`),
		openaitest.ToolCallChunk(0, "c2", "b", `{"y":2}`),
		openaitest.FinishChunk("tool_calls"), openaitest.Done)))
	ds, r, err := stream(t, newModel(t, srv))
	want := []messages.ToolCall{{ID: "c1", Name: "a", Arguments: `{"x":1}`}, {ID: "c2", Name: "b", Arguments: `{"y":2}`}}
	if err != nil || !reflect.DeepEqual(r.Message.ToolCalls, want) {
		t.Fatalf("calls %+v, err %v: want %+v", r.Message.ToolCalls, err, want)
	}
	// The increments place each piece at its call's position in the answer.
	args := map[int]string{}
	for _, d := range ds {
		args[d.ToolCallIndex] += d.ArgumentsDelta
	}
	if args[0] != want[0].Arguments || args[1] != want[1].Arguments {
		t.Fatalf("increments' arguments by index %v", args)
	}
}
