package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/troupe-run/troupe/llm"
)

// defaultConcurrency is the limit of a provider that limits does not name.
const defaultConcurrency = 64

// LimitConcurrency bounds the calls in flight per provider: limits[provider] at most
// (absent or not positive: 64). A model's provider is its Provider() when it is a
// ProviderNamer, else its Name(); every model of one provider that this middleware
// wraps shares its slots. A call waits for a slot; a call whose context ends first
// returns an error wrapping ctx.Err() without reaching the model.
func LimitConcurrency(limits map[string]int) Middleware {
	var mu sync.Mutex
	slots := map[string]chan struct{}{}
	return func(next llm.Model) llm.Model {
		provider := next.Name()
		if p, ok := next.(ProviderNamer); ok {
			provider = p.Provider()
		}
		mu.Lock()
		defer mu.Unlock()
		s, ok := slots[provider]
		if !ok {
			n := limits[provider]
			if n <= 0 {
				n = defaultConcurrency
			}
			s = make(chan struct{}, n)
			slots[provider] = s
		}
		return &limited{Model: next, provider: provider, slots: s}
	}
}

type limited struct {
	llm.Model
	provider string
	slots    chan struct{}
}

func (m *limited) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	// A free slot is taken without asking ctx for its Done channel, which a
	// cancelable context makes on first use: most calls find a slot.
	select {
	case m.slots <- struct{}{}:
	default:
		select {
		case m.slots <- struct{}{}:
		case <-ctx.Done():
			return llm.Response{}, fmt.Errorf("gateway: waiting for one of the %d call slots of provider %s: %w", cap(m.slots), m.provider, ctx.Err())
		}
	}
	defer func() { <-m.slots }()
	return m.Model.Generate(ctx, req)
}

// Provider names the provider whose slots the call takes (ProviderNamer).
func (m *limited) Provider() string { return m.provider }

// Endpoint names the wrapped model's rate limit (EndpointNamer), for Cooldown.
func (m *limited) Endpoint() string {
	if e, ok := m.Model.(EndpointNamer); ok {
		return e.Endpoint()
	}
	return ""
}
