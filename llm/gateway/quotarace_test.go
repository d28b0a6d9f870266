package gateway_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

// A quota bounds what concurrent calls spend too: the calls in flight count
// against it at an estimate of their prompts until their answers are charged.
// Before, every call that started before the first answer was charged passed the
// check: twenty calls in flight spent twenty times a quota that three of them fill.
func TestQuotaBoundsConcurrentCalls(t *testing.T) {
	release := make(chan struct{})
	var entered, refused atomic.Int32
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		entered.Add(1)
		<-release
		return llm.Response{Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "x"},
			Usage: messages.Usage{PromptTokens: 100, CompletionTokens: 5}}, nil
	}}
	// A prompt of about 100 tokens (llm.EstimateTokens: four bytes a token).
	req := llm.Request{Step: 1, Scope: llm.Scope{Agent: "a"}, Messages: []messages.ChatMessage{
		{Role: messages.RoleUser, Content: strings.Repeat("word ", 80)}}}
	if e := llm.EstimateTokens(req.Messages); e < 90 || e > 110 {
		t.Fatalf("the prompt is estimated at %d tokens; the test wants about 100", e)
	}
	q := gateway.Quotas([]gateway.Quota{{Scope: "agent:a", Tokens: 250, Window: time.Hour}}, nil)(m)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.Generate(context.Background(), req); err != nil {
				if !errors.Is(err, gateway.ErrQuotaExceeded) {
					t.Error(err)
				}
				refused.Add(1)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for entered.Load()+refused.Load() < 20 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := entered.Load(); n != 3 {
		t.Fatalf("%d calls let through a quota of 250 tokens while calls of about 100 were in flight; want 3 (0, 100 and 200 tokens spent or on their way)", n)
	}
	// Their answers are charged (3 x 105 tokens): the quota is spent.
	if _, err := q.Generate(context.Background(), req); !errors.Is(err, gateway.ErrQuotaExceeded) {
		t.Fatalf("a call after the three were charged: %v, want the quota exceeded", err)
	}
}

// A call that fails gives its estimate back: the calls after it are let through.
func TestQuotaReservationOfAFailedCallIsGivenBack(t *testing.T) {
	fail := true
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		if fail {
			return llm.Response{}, errors.New("the provider is down")
		}
		return answer("x"), nil
	}}
	req := llm.Request{Step: 1, Scope: llm.Scope{Agent: "a"}, Messages: []messages.ChatMessage{
		{Role: messages.RoleUser, Content: strings.Repeat("word ", 80)}}}
	q := gateway.Quotas([]gateway.Quota{{Scope: "agent:a", Tokens: 150, Window: time.Hour}}, nil)(m)
	for range 5 {
		if _, err := q.Generate(context.Background(), req); err == nil || errors.Is(err, gateway.ErrQuotaExceeded) {
			t.Fatalf("a failing call: %v, want the provider's error", err)
		}
	}
	fail = false
	if _, err := q.Generate(context.Background(), req); err != nil {
		t.Fatalf("a call after five failed ones: %v", err)
	}
}
