package gateway_test

import (
	"context"
	"testing"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// The gateway's overhead per call, against the same call made with the SDK directly,
// both against a fake OpenAI-compatible server on loopback (no network latency).
// Compare BenchmarkCallSDK and BenchmarkCallGateway with benchstat; the ratio is the
// price of the gateway (retry bookkeeping, quota and cache checks, token accounting,
// cost) plus llm/openai's request and response mapping.

func fakeServer(b *testing.B) *openaitest.Server {
	reply := openaitest.Completion(messages.ChatMessage{Content: "144"}, messages.Usage{PromptTokens: 40, CompletionTokens: 2})
	return openaitest.NewServer(b, func(openaitest.Request) openaitest.Reply { return reply })
}

var benchMessages = []messages.ChatMessage{
	{Role: messages.RoleSystem, Content: "You are a helpful agent."},
	{Role: messages.RoleUser, Content: "What is 12 * (7 + 5)?"},
}

func BenchmarkCallSDK(b *testing.B) {
	srv := fakeServer(b)
	client := sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("sk-bench"), option.WithMaxRetries(0))
	ctx := context.Background()
	for b.Loop() {
		_, err := client.Chat.Completions.New(ctx, sdk.ChatCompletionNewParams{
			Model: "fake-model",
			Messages: []sdk.ChatCompletionMessageParamUnion{
				sdk.SystemMessage(benchMessages[0].Content), sdk.UserMessage(benchMessages[1].Content),
			},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallGateway(b *testing.B) {
	srv := fakeServer(b)
	m, err := openai.New(openai.Config{BaseURL: srv.URL, APIKey: "sk-bench", Model: "fake-model"})
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m},
		Quotas: []gateway.Quota{{Scope: "agent:*", Tokens: 1 << 62, Window: 3600e9}},
		Prices: map[string]gateway.Price{"fake-model": {Prompt: 1, Completion: 2}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := llm.Request{Step: 1, Messages: benchMessages, Scope: llm.Scope{Agent: "bench"}}
	for b.Loop() {
		if _, err := g.Generate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// The gateway's own overhead per call, without HTTP: every layer New builds for the
// Config BenchmarkCallGateway uses, over a model that answers at once.
func BenchmarkGatewayInProcess(b *testing.B) {
	m := &fakeModel{name: "fake-model", fn: func(int, llm.Request) (llm.Response, error) { return answer("144"), nil }}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m},
		Quotas: []gateway.Quota{{Scope: "agent:*", Tokens: 1 << 62, Window: 3600e9}},
		Prices: map[string]gateway.Price{"fake-model": {Prompt: 1, Completion: 2}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := llm.Request{Step: 1, Messages: benchMessages, Scope: llm.Scope{Agent: "bench"}}
	for b.Loop() {
		if _, err := g.Generate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
