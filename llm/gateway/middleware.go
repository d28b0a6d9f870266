package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/troupe-run/troupe/llm"
)

// Middleware decorates a model with one concern (retries, fallback, a quota, a cache,
// pricing, token counting, a concurrency limit), as Watermill's HandlerMiddleware
// decorates a handler. The model it returns has the Name of the model it wraps.
// Middleware that keep state (a cache, a quota's spend, a provider's call slots)
// create it when they are built, and share it between every model they wrap.
type Middleware func(llm.Model) llm.Model

// Chain wraps m in mws, the first outermost: Chain(m, a, b) is a(b(m)), so a sees a
// request first and an answer last.
func Chain(m llm.Model, mws ...Middleware) llm.Model {
	for i := len(mws) - 1; i >= 0; i-- {
		m = mws[i](m)
	}
	return m
}

// stopped returns err, wrapped with ctx.Err() when the context is done and err does
// not already say so: a layer that stops because its context ended says why, whatever
// the layer below returned.
func stopped(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}
