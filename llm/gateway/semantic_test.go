package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

func TestSemanticCacheAnswersANearIdenticalOpeningQuestion(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	m := answering("m", "paris")
	cached := gateway.SemanticCache(gateway.SemanticConfig{Embedder: llm.HashingEmbedder{}, Threshold: 0.8, TTL: time.Hour}, c.Now)(m)
	ctx := context.Background()
	if r, _ := cached.Generate(ctx, ask("What is the capital of France?")); r.Cached {
		t.Fatal("the first question must reach the model")
	}
	if r, _ := cached.Generate(ctx, ask("what is the capital of france")); !r.Cached || r.Message.Content != "paris" || m.calls.Load() != 1 {
		t.Fatalf("a near-identical question must hit: %+v, calls %d", r, m.calls.Load())
	}
	if r, _ := cached.Generate(ctx, ask("How many moons does Jupiter have?")); r.Cached {
		t.Fatal("a different question must miss")
	}
	otherSystem := ask("What is the capital of France?")
	otherSystem.Messages[0].Content = "another system prompt"
	if r, _ := cached.Generate(ctx, otherSystem); r.Cached {
		t.Fatal("another system prompt must miss")
	}
	mid := ask("What is the capital of France?")
	mid.Messages = append(mid.Messages, messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "1", Name: "x"}}},
		messages.ChatMessage{Role: messages.RoleTool, ToolCallID: "1", Content: "r"})
	if r, _ := cached.Generate(ctx, mid); r.Cached {
		t.Fatal("mid-task requests must not hit")
	}
	bypass := ask("What is the capital of France?")
	bypass.NoCache = true
	if r, _ := cached.Generate(ctx, bypass); r.Cached {
		t.Fatal("NoCache must reach the model")
	}
	c.add(time.Hour)
	if r, _ := cached.Generate(ctx, ask("What is the capital of France?")); r.Cached {
		t.Fatal("an expired entry must not answer")
	}
}

type failingEmbedder struct{}

func (failingEmbedder) Embed(context.Context, []string) ([][]float32, error) {
	return nil, errors.New("embedder down")
}

// An embedder that fails makes a miss, not a failed call.
func TestSemanticCacheMissesWhenTheEmbedderFails(t *testing.T) {
	m := answering("m", "paris")
	cached := gateway.SemanticCache(gateway.SemanticConfig{Embedder: failingEmbedder{}, Threshold: 0.8, TTL: time.Hour}, nil)(m)
	for i := 0; i < 2; i++ {
		if r, err := cached.Generate(context.Background(), ask("What is the capital of France?")); err != nil || r.Cached {
			t.Fatalf("%+v %v", r, err)
		}
	}
	if m.calls.Load() != 2 {
		t.Fatalf("calls %d", m.calls.Load())
	}
	if gateway.SemanticCache(gateway.SemanticConfig{}, nil)(m) != llm.Model(m) {
		t.Fatal("a semantic cache without an embedder must leave the model unwrapped")
	}
}
