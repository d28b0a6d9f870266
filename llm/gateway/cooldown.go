package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/troupe-run/troupe/llm"
)

// ErrCoolingDown is wrapped by the error of a call that Cooldown did not send: its
// provider said it is rate limited (a 429) for longer than the call may wait (past
// its deadline, past RetryPolicy.MaxRetryAfter), or a fallback model follows it in
// its chain and may answer at once. It is not transient: Retry returns it and
// Fallback tries the next model.
var ErrCoolingDown = errors.New("the provider is cooling down after a rate limit (429)")

// EndpointNamer is implemented by models that know the rate limit their calls
// share: a provider's base URL and API key (openai.Model.Endpoint; a digest of the
// key, never the key). Cooldown keys its cooldowns by it; a model that is no
// EndpointNamer shares its provider's (ProviderNamer), else its own name's.
type EndpointNamer interface {
	Endpoint() string
}

// endpointOf is the key of m's cooldown.
func endpointOf(m llm.Model) string {
	if e, ok := m.(EndpointNamer); ok {
		if s := e.Endpoint(); s != "" {
			return "endpoint:" + s
		}
	}
	if p, ok := m.(ProviderNamer); ok {
		return "provider:" + p.Provider()
	}
	return "model:" + m.Name()
}

// Cooldown holds back the calls to a provider that answered 429 (rate limited;
// not an account out of credits, which is no transient failure) until the wait it
// asked for ends: its Retry-After, else p.Initial. Every call to that endpoint (base
// URL and API key: EndpointNamer) waits with sleep (nil: a timer honouring ctx)
// before it is sent, instead of each one finding the limit on its own; a call's
// context still ends its wait at once (the error wraps ctx.Err()). A call that
// cannot wait fails at once with ErrCoolingDown, not transient, without reaching
// the provider: one whose deadline would pass first (the error wraps
// context.DeadlineExceeded too), one whose wait is longer than p.MaxRetryAfter, and
// one that a fallback model follows in its chain (Fallback), which then answers
// instead. onHold, when set, is called once for each call held back, with its
// model's name and whether it waited (else it failed over); it must not block.
func Cooldown(p RetryPolicy, clock func() time.Time, sleep func(ctx context.Context, d time.Duration) error,
	onHold func(model string, waited bool)) Middleware {
	p = p.withDefaults()
	if clock == nil {
		clock = time.Now
	}
	if sleep == nil {
		sleep = sleepCtx
	}
	b := &cooldowns{until: map[string]time.Time{}}
	return func(next llm.Model) llm.Model {
		return &coolingDown{Model: next, endpoint: endpointOf(next), book: b, p: p, clock: clock, sleep: sleep, onHold: onHold}
	}
}

// cooldowns is when each endpoint's cooldown ends.
type cooldowns struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (b *cooldowns) end(endpoint string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until[endpoint]
}

// extend makes endpoint's cooldown last until t at least.
func (b *cooldowns) extend(endpoint string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.After(b.until[endpoint]) {
		b.until[endpoint] = t
	}
}

type coolingDown struct {
	llm.Model
	endpoint string
	book     *cooldowns
	p        RetryPolicy
	clock    func() time.Time
	sleep    func(ctx context.Context, d time.Duration) error
	onHold   func(model string, waited bool)
}

func (c *coolingDown) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	if err := c.wait(ctx); err != nil {
		return llm.Response{}, err
	}
	resp, err := c.Model.Generate(ctx, req)
	if d, ok := c.rateLimited(err); ok {
		c.book.extend(c.endpoint, c.clock().Add(d))
	}
	return resp, err
}

// wait returns once the endpoint's cooldown is over, or the error of a call that
// does not wait for it.
func (c *coolingDown) wait(ctx context.Context) error {
	held := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := c.book.end(c.endpoint)
		wait := end.Sub(c.clock())
		if wait <= 0 {
			return nil
		}
		refuse := func(why string, also ...error) error {
			if !held && c.onHold != nil {
				c.onHold(c.Name(), false)
			}
			err := fmt.Errorf("gateway: model %s: %w for %s more: %s", c.Name(), ErrCoolingDown, wait.Round(time.Millisecond), why)
			for _, e := range also {
				err = fmt.Errorf("%w: %w", err, e)
			}
			return err
		}
		switch dl, hasDeadline := ctx.Deadline(); {
		case followed(ctx):
			return refuse("a fallback model follows")
		case wait > c.p.MaxRetryAfter:
			return refuse(fmt.Sprintf("longer than the %s this gateway waits", c.p.MaxRetryAfter))
		case hasDeadline && time.Until(dl) <= wait:
			return refuse("waiting would pass the call's deadline", context.DeadlineExceeded)
		}
		if !held {
			held = true
			if c.onHold != nil {
				c.onHold(c.Name(), true)
			}
		}
		if err := c.sleep(ctx, wait); err != nil {
			return stopped(ctx, fmt.Errorf("gateway: model %s: waiting %s for its provider's cooldown: %w", c.Name(), wait, err))
		}
		if !c.book.end(c.endpoint).After(end) {
			return nil // the wait is over (sleep says so, whatever the clock), and no 429 extended it
		}
	}
}

// rateLimited reports whether err is a provider's rate limit (a transient 429), and
// how long its provider asked to be left alone.
func (c *coolingDown) rateLimited(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	var api *llm.APIError // on the heap (errors.As): made for a failed call only
	if !errors.As(err, &api) || api.StatusCode != http.StatusTooManyRequests || !errors.Is(err, llm.ErrTransient) {
		return 0, false
	}
	if hint, ok := llm.RetryAfter(err); ok {
		return hint, true
	}
	return c.p.Initial, true
}

// Provider names the wrapped model's provider (ProviderNamer), for LimitConcurrency.
func (c *coolingDown) Provider() string {
	if p, ok := c.Model.(ProviderNamer); ok {
		return p.Provider()
	}
	return c.Model.Name()
}

// followedKey marks a context whose call has a fallback model after it (Fallback).
type followedKey struct{}

// withFollowed returns ctx marked as a call that a fallback model follows, or not.
func withFollowed(ctx context.Context, more bool) context.Context {
	return context.WithValue(ctx, followedKey{}, more)
}

// followed reports whether a fallback model follows the call of ctx.
func followed(ctx context.Context) bool {
	more, _ := ctx.Value(followedKey{}).(bool)
	return more
}
