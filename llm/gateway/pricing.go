package gateway

import (
	"context"

	"github.com/troupe-run/troupe/llm"
)

// Pricing sets the answer's Usage.CostUSD from the price of the model it wraps, looked
// up by the model's name in prices when the middleware is applied: cached prompt
// tokens at Price.Cached, the other prompt tokens at Price.Prompt and completion
// tokens at Price.Completion. A model without a price is returned unwrapped, so its
// answers keep whatever cost it reported (none, usually). It prices the tokens the
// answer reports: wrap a model that counts them (CountTokens) when a provider may
// report none. In a fallback chain, each model is wrapped on its own, so an answer is
// priced as the model that gave it.
func Pricing(prices map[string]Price) Middleware {
	return func(next llm.Model) llm.Model {
		p, ok := prices[next.Name()]
		if !ok {
			return next
		}
		return &priced{Model: next, price: p}
	}
}

type priced struct {
	llm.Model
	price Price
}

func (m *priced) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	resp, err := m.Model.Generate(ctx, req) // a failed call's Usage is priced too (llm.Model)
	p, u := m.price, &resp.Usage
	cachedPrice := p.Cached
	if cachedPrice == 0 {
		cachedPrice = p.Prompt
	}
	cached := min(u.CachedTokens, u.PromptTokens)
	u.CostUSD = (float64(u.PromptTokens-cached)*p.Prompt + float64(cached)*cachedPrice + float64(u.CompletionTokens)*p.Completion) / 1e6
	return resp, err
}
