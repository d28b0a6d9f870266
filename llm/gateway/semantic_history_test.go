package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// A task that opens a session's second turn asks its question after the earlier
// ones: "And its population?" after France is not the question after Japan. The
// semantic cache answers a question only from one asked after the same
// conversation (and the same tools, schemas and all), not from any question of the
// same words.
func TestSemanticCacheTellsTheConversationBeforeTheQuestion(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, req llm.Request) (llm.Response, error) {
		return answer(req.Messages[1].Content), nil
	}}
	cached := gateway.SemanticCache(gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.8, TTL: time.Hour}, nil)(m)
	after := func(first, reply string) llm.Request {
		r := ask(first)
		r.Messages = append(r.Messages, messages.ChatMessage{Role: messages.RoleAssistant, Content: reply},
			messages.ChatMessage{Role: messages.RoleUser, Content: "And its population?"})
		return r
	}
	ctx := context.Background()
	if _, err := cached.Generate(ctx, after("What is the capital of France?", "Paris")); err != nil {
		t.Fatal(err)
	}
	r, err := cached.Generate(ctx, after("What is the capital of Japan?", "Tokyo"))
	if err != nil || r.Cached || m.calls.Load() != 2 {
		t.Fatalf("%+v, %v, calls %d: the question after Japan was answered with the one after France", r, err, m.calls.Load())
	}
	// Tools of the same names with other parameters are other tools.
	withTool := func(params string) llm.Request {
		r := ask("Look up the weather in Paris")
		r.Tools = []messages.ToolSpec{{Name: "weather", Parameters: []byte(params)}}
		return r
	}
	_, _ = cached.Generate(ctx, withTool(`{"type":"object","properties":{"city":{"type":"string"}}}`))
	if r, _ := cached.Generate(ctx, withTool(`{"type":"object","properties":{"lat":{"type":"number"}}}`)); r.Cached {
		t.Fatalf("tools of other parameters: %+v served from the cache", r)
	}
}
