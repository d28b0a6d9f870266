package gateway_test

import (
	"context"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
)

func withUsage(name string, u messages.Usage) *fakeModel {
	return &fakeModel{name: name, fn: func(int, llm.Request) (llm.Response, error) {
		r := answer("ok")
		r.Usage = u
		return r, nil
	}}
}

func TestPricingPricesTheWrappedModelsTokens(t *testing.T) {
	prices := map[string]gateway.Price{"cheap": {Prompt: 2, Completion: 8, Cached: 1}, "flat": {Prompt: 3, Completion: 6}}
	for _, tc := range []struct {
		model string
		usage messages.Usage
		want  float64
	}{
		{"cheap", messages.Usage{PromptTokens: 1000, CompletionTokens: 500, CachedTokens: 400}, (600*2.0 + 400*1.0 + 500*8.0) / 1e6},
		{"flat", messages.Usage{PromptTokens: 1000, CompletionTokens: 500, CachedTokens: 400}, (1000*3.0 + 500*6.0) / 1e6}, // cached at the prompt price
		{"cheap", messages.Usage{PromptTokens: 100, CompletionTokens: 0, CachedTokens: 400}, 100 * 1.0 / 1e6},              // no more cached than prompt tokens
	} {
		r, err := gateway.Pricing(prices)(withUsage(tc.model, tc.usage)).Generate(context.Background(), ask("q"))
		if err != nil || r.Usage.CostUSD < tc.want-1e-12 || r.Usage.CostUSD > tc.want+1e-12 {
			t.Errorf("%s %+v: cost %v, want %v (%v)", tc.model, tc.usage, r.Usage.CostUSD, tc.want, err)
		}
	}
}

func TestPricingLeavesAnUnpricedModelAndAFailureAlone(t *testing.T) {
	reported := withUsage("unpriced", messages.Usage{PromptTokens: 10, CostUSD: 0.25})
	m := gateway.Pricing(map[string]gateway.Price{"other": {Prompt: 1}})(reported)
	if m != llm.Model(reported) {
		t.Fatal("a model without a price must be left unwrapped")
	}
	down := failWith("priced", &llm.APIError{StatusCode: 500})
	if _, err := gateway.Pricing(map[string]gateway.Price{"priced": {Prompt: 1}})(down).Generate(context.Background(), ask("q")); !errors.Is(err, llm.ErrTransient) {
		t.Fatalf("err %v", err)
	}
}
