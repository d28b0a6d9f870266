package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

// vLLM reports any failure of a stream (an engine that crashed) as an error event
// with code 400: the gateway retries it, as a failure after the server took the
// request, and the next attempt answers.
func TestAStreamsErrorEventWithCode400IsRetried(t *testing.T) {
	crash := openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("The"),
		`{"error":{"object":"error","message":"Background loop has errored already.","type":"BadRequestError","param":null,"code":400}}`)
	srv := openaitest.NewServer(t, openaitest.Sequence(crash, openaitest.TextStream(messages.Usage{PromptTokens: 5, CompletionTokens: 2}, "The", " answer")))
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "p", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 2},
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ctx = llm.WithDeltas(ctx, func(int, llm.Delta) {})
	r, err := g.Generate(ctx, llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}})
	if err != nil || r.Message.Content != "The answer" {
		t.Fatalf("%+v %v: want the second attempt's answer", r, err)
	}
}
