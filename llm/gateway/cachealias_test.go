package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// An answer a cache serves is the caller's own: changing its tool calls changes
// neither the cache's entry nor the answer the next caller gets.
func TestCachedAnswerIsTheCallersOwn(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant,
			ToolCalls: []messages.ToolCall{{ID: "1", Name: "x", Arguments: "{}"}}}}, nil
	}}
	for name, cache := range map[string]gateway.Middleware{
		"exact":    gateway.ExactCache(gateway.CacheConfig{TTL: time.Hour}, nil),
		"semantic": gateway.SemanticCache(gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.9, TTL: time.Hour}, nil),
	} {
		c := cache(m)
		first, _ := c.Generate(context.Background(), ask("q"))
		first.Message.ToolCalls[0].Arguments = "changed by the first caller"
		hit, _ := c.Generate(context.Background(), ask("q"))
		hit.Message.ToolCalls[0].Arguments = "changed by the second caller"
		again, _ := c.Generate(context.Background(), ask("q"))
		if !again.Cached || again.Message.ToolCalls[0].Arguments != "{}" {
			t.Errorf("%s: %+v: want the cached call's own arguments", name, again)
		}
	}
}
