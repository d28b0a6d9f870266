package gateway_test

import (
	"context"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// answerNothing answers every call, allocating nothing.
type answerNothing struct{}

func (answerNothing) Name() string { return "nothing" }
func (answerNothing) Generate(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{}, nil
}

// TestLimitAndCooldownAllocateNothingOnASuccess: a call that finds a free slot and
// succeeds costs LimitConcurrency and Cooldown no allocation, even under a
// cancelable context (whose Done channel is made on first use): every model step
// of a node goes through both.
func TestLimitAndCooldownAllocateNothingOnASuccess(t *testing.T) {
	m := gateway.Chain(answerNothing{}, gateway.LimitConcurrency(nil), gateway.Cooldown(gateway.RetryPolicy{}, nil, nil, nil))
	var req llm.Request
	allocs := testing.AllocsPerRun(100, func() {
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := m.Generate(ctx, req); err != nil {
			t.Fatal(err)
		}
		cancel()
	})
	// context.WithCancel's own context and its cancel func are the test's.
	base := testing.AllocsPerRun(100, func() {
		_, cancel := context.WithCancel(context.Background())
		cancel()
	})
	if allocs > base {
		t.Errorf("a call allocated %.0f times beside its context's %.0f, want none", allocs-base, base)
	}
}
