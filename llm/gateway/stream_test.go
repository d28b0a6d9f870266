package gateway_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/llm/openai/openaitest"
	"github.com/troupe-run/troupe/messages"
)

type seen struct {
	attempt int
	text    string
}

// A gateway call with a llm.DeltaFunc streams through every layer: a stream cut
// mid-answer is retried and streams again under attempt 2, a provider that fails
// for good falls back to the next model, streamed under attempt 3, and the answer
// is whole, priced and counted; without a DeltaFunc nothing streams.
func TestGatewayStreamsThroughRetryAndFallback(t *testing.T) {
	down := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("half "), openaitest.ContentChunk("an ")}, Abort: true},
		openaitest.Error(400, "no more"),
	))
	up := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.TextStream(messages.Usage{PromptTokens: 10, CompletionTokens: 3}, "a ", "whole ", "answer"),
		openaitest.Completion(messages.ChatMessage{Content: "not streamed"}, messages.Usage{PromptTokens: 10, CompletionTokens: 2}),
	))
	model := func(srv *openaitest.Server, name string) llm.Model {
		m, err := openai.New(openai.Config{Provider: name, BaseURL: srv.URL, Model: name, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{model(down, "down"), model(up, "up")},
		Retry:  gateway.RetryPolicy{MaxAttempts: 2, Initial: time.Millisecond, Max: time.Millisecond},
		Prices: map[string]gateway.Price{"up": {Prompt: 1, Completion: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []seen
	ctx := llm.WithDeltas(context.Background(), func(attempt int, d llm.Delta) { got = append(got, seen{attempt, d.Content}) })
	resp, err := g.Generate(ctx, ask("q"))
	if err != nil || resp.Message.Content != "a whole answer" || resp.Model != "up" || resp.Usage.CostUSD == 0 {
		t.Fatalf("%+v %v", resp, err)
	}
	want := []seen{{1, "half "}, {1, "an "}, {3, "a "}, {3, "whole "}, {3, "answer"}}
	if len(got) != len(want) {
		t.Fatalf("deltas %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("deltas %v, want %v", got, want)
		}
	}
	// The second request to "up" has no DeltaFunc: it is a plain completion.
	if resp, err := g.Generate(context.Background(), ask("q2")); err != nil || resp.Message.Content != "not streamed" && resp.Model != "up" {
		t.Fatalf("%+v %v", resp, err)
	}
	if reqs := up.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[0].Body), `"stream":true`) || strings.Contains(string(reqs[1].Body), `"stream":true`) {
		t.Fatalf("requests to up: %d", len(reqs))
	}
}

// A stream cut on every attempt fails with the transient truncation, never a partial
// answer.
func TestGatewayStreamCutEveryAttemptFails(t *testing.T) {
	cut := openaitest.Reply{Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("half")}, Stall: false}
	cut.Events = append(cut.Events, openaitest.FinishChunk("stop")) // no [DONE]: cut before the end
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply { return cut })
	m, err := openai.New(openai.Config{Provider: "p", BaseURL: srv.URL, Model: "p", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	attempts := map[int]bool{}
	ctx := llm.WithDeltas(context.Background(), func(attempt int, _ llm.Delta) { attempts[attempt] = true })
	resp, err := g.Generate(ctx, ask("q"))
	if !errors.Is(err, openai.ErrTruncatedStream) || resp.Message.Content != "" || len(attempts) != 3 {
		t.Fatalf("%+v %v attempts %v", resp, err, attempts)
	}
}
