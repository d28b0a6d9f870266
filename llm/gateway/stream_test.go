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
	// No finish_reason, no [DONE]: cut before the end. (A stream cut after its
	// finish_reason is whole: TestGatewayTakesAStreamFinishedWithoutDone.)
	cut := openaitest.Reply{Events: []string{openaitest.RoleChunk(), openaitest.ContentChunk("half")}}
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply { return cut })
	m := provider(t, srv, "p", "")
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

// A stream that delivered its finish_reason and usage but closed without [DONE] is
// the answer, taken once and recorded with its usage: no retry pays for it again.
func TestGatewayTakesAStreamFinishedWithoutDone(t *testing.T) {
	u := messages.Usage{PromptTokens: 40, CompletionTokens: 3}
	srv := openaitest.NewServer(t, func(openaitest.Request) openaitest.Reply {
		return openaitest.Stream(openaitest.RoleChunk(), openaitest.ContentChunk("whole"), openaitest.FinishChunk("stop"), openaitest.UsageChunk(u))
	})
	m := provider(t, srv, "p", "")
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 3, Initial: time.Millisecond, Max: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := llm.WithDeltas(context.Background(), func(int, llm.Delta) {})
	resp, err := g.Generate(ctx, ask("q"))
	if err != nil || resp.Message.Content != "whole" || resp.Usage.PromptTokens != u.PromptTokens || resp.Usage.CompletionTokens != u.CompletionTokens {
		t.Fatalf("%+v %v: want the answer with usage %+v", resp, err, u)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Fatalf("%d requests: the finished answer was sent again", n)
	}
}
