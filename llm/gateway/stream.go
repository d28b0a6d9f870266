package gateway

import (
	"context"

	"github.com/troupe-run/troupe/llm"
)

// Streaming makes the model it wraps stream when the call's context asks for
// increments (llm.WithDeltas) and the model can (llm.Streamer): each call is then one
// streamed attempt of that context, numbered by llm.StreamOrGenerate, and a retry or
// a fallback above it streams again under the next number. Without a llm.DeltaFunc
// in the context, or with a model that does not stream, it calls Generate. It is the
// innermost layer, so that the model below it is the provider's own.
func Streaming() Middleware {
	return func(next llm.Model) llm.Model {
		if _, ok := next.(llm.Streamer); !ok {
			return next
		}
		return streaming{next}
	}
}

type streaming struct{ llm.Model }

func (s streaming) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	return llm.StreamOrGenerate(ctx, s.Model, req)
}

// Provider names the wrapped model's provider (ProviderNamer), for LimitConcurrency.
func (s streaming) Provider() string {
	if p, ok := s.Model.(ProviderNamer); ok {
		return p.Provider()
	}
	return s.Model.Name()
}

// Endpoint names the wrapped model's rate limit (EndpointNamer), for Cooldown.
func (s streaming) Endpoint() string {
	if e, ok := s.Model.(EndpointNamer); ok {
		return e.Endpoint()
	}
	return ""
}

// Capabilities reports the wrapped model's (llm.CapabilityReporter).
func (s streaming) Capabilities() llm.Capabilities { return llm.CapabilitiesOf(s.Model) }
