//go:build review

package openai_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A provider (a proxy, a router) that answers HTTP 200 with an error object, not a
// completion, is reported as the provider's error, with its message (the key
// redacted) and as transient, as the same error in an event stream is; not as a
// completion without choices that the gateway would never retry.
func TestErrorObjectOfA200IsTheProvidersError(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{
		Body: `{"error":{"message":"upstream overloaded for key ` + testKey + `","code":429}}`}))
	_, err := newModel(t, srv).Generate(deadline(t), hello())
	if err == nil || !strings.Contains(err.Error(), "upstream overloaded") || !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("err %v: want the provider's message, transient", err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("err %v prints the key", err)
	}
}

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
