package gateway_test

import (
	"context"
	"strconv"
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

// An error event that is a stream's first, before any chunk, is the server's answer
// to the request, as an error response is: a request refused (404, 422) is not
// sent again, a server's failure (503) is, and the next attempt answers. So is a
// 400, vLLM's code for any failure of its stream, an engine that died included.
func TestAStreamsFirstErrorEventIsRetriedByItsCode(t *testing.T) {
	for _, c := range []struct {
		code     int
		requests int
	}{{400, 2}, {404, 1}, {422, 1}, {503, 2}} {
		refused := openaitest.Stream(`{"error":{"message":"refused","type":"invalid_request_error","code":`+strconv.Itoa(c.code)+`}}`, openaitest.Done)
		srv := openaitest.NewServer(t, openaitest.Sequence(refused, openaitest.TextStream(messages.Usage{PromptTokens: 5, CompletionTokens: 2}, "The", " answer")))
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
		ctx = llm.WithDeltas(ctx, func(int, llm.Delta) {})
		r, err := g.Generate(ctx, llm.Request{Step: 1, Messages: []messages.ChatMessage{{Role: messages.RoleUser, Content: "hi"}}})
		cancel()
		if n := len(srv.Requests()); n != c.requests {
			t.Errorf("code %d: %d requests, want %d (answer %+v, err %v)", c.code, n, c.requests, r, err)
		}
		if c.requests == 1 && err == nil || c.requests == 2 && (err != nil || r.Message.Content != "The answer") {
			t.Errorf("code %d: answer %+v, err %v", c.code, r, err)
		}
	}
}
