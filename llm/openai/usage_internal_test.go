package openai

import (
	"math"
	"testing"

	sdk "github.com/openai/openai-go/v3"
)

// A usage count a provider gets wrong (1e30 tokens, read as the largest int64;
// a negative one) is bounded, so that the sums of retries, token budgets and
// quotas over it stay positive: before, two such calls added up to a negative
// count, which let every budget and quota through.
func TestUsageCountsAreBounded(t *testing.T) {
	u := usage(sdk.CompletionUsage{PromptTokens: math.MaxInt64, CompletionTokens: -5})
	if u.PromptTokens != 1<<40 || u.CompletionTokens != 0 {
		t.Fatalf("usage = %+v; want prompt tokens %d and completion tokens 0", u, 1<<40)
	}
	sum := 0
	for range 1000 {
		sum += u.PromptTokens
	}
	if sum <= 0 {
		t.Errorf("a thousand bounded counts add up to %d", sum)
	}
	if u := usage(sdk.CompletionUsage{PromptTokens: 1234, CompletionTokens: 56}); u.PromptTokens != 1234 || u.CompletionTokens != 56 {
		t.Errorf("usage = %+v; want the counts as given", u)
	}
}
