package openai_test

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// A stream whose chunks carry "error": null (no error: the member is there and
// empty, as a whole answer may have it too) is an answer, as the same answer read
// whole is: the SDK took any "error" member for the provider's error, and the call
// failed as transient, retried until its attempts were spent, every one of them
// billed.
func TestStreamChunksWithANullErrorAreAnAnswer(t *testing.T) {
	withNull := func(chunk string) string { return strings.TrimSuffix(chunk, "}") + `,"error":null}` }
	u := messages.Usage{PromptTokens: 9, CompletionTokens: 2}
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(
		withNull(openaitest.RoleChunk()), withNull(openaitest.ContentChunk("Hi")), withNull(openaitest.ContentChunk(" there")),
		withNull(openaitest.FinishChunk("stop")), withNull(openaitest.UsageChunk(u)), openaitest.Done)))
	deltas, r, err := stream(t, newModel(t, srv))
	if err != nil {
		t.Fatalf("a stream with \"error\": null in its chunks failed: %v", err)
	}
	if r.Message.Content != "Hi there" || r.Usage != u || r.FinishReason != "" || len(deltas) != 2 {
		t.Fatalf("answer %+v (deltas %+v), want \"Hi there\" with usage %+v", r, deltas, u)
	}
	// A real error member still fails the stream.
	srv = openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(openaitest.RoleChunk(),
		`{"error":{"message":"upstream overloaded"}}`)))
	if _, _, err := stream(t, newModel(t, srv)); err == nil || !strings.Contains(err.Error(), "upstream overloaded") {
		t.Fatalf("an error event: %v", err)
	}
}
