package openai_test

import (
	"fmt"
	"testing"

	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// Some OpenAI-compatible servers (llama.cpp's of 2024, Foundry Local) give every
// chunk of a stream an id of its own, or send the usage chunk without one. One
// response is one answer whatever its chunks' ids: it is assembled, not failed as
// malformed after it was generated (and paid for) whole.
func TestStreamWhoseChunksHaveIDsOfTheirOwn(t *testing.T) {
	chunk := func(id, delta, finish string) string {
		return fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, id, delta, finish)
	}
	usage := `{"id":"","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Stream(
		chunk("chatcmpl-1", `{"role":"assistant","content":"Under"}`, "null"),
		chunk("chatcmpl-2", `{"content":"stood"}`, "null"),
		chunk("chatcmpl-3", `{}`, `"stop"`), usage, openaitest.Done)))
	_, r, err := stream(t, newModel(t, srv))
	if err != nil || r.Message.Content != "Understood" || r.Usage != (messages.Usage{PromptTokens: 3, CompletionTokens: 2}) {
		t.Fatalf("%+v, %v: want the answer \"Understood\" and its usage", r, err)
	}
}
