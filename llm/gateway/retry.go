package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/troupe-run/troupe/llm"
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 4
	}
	if p.Initial <= 0 {
		p.Initial = 200 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 20 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = time.Minute
	}
	return p
}

// Retry retries a call that failed with an error wrapping llm.ErrTransient, up to
// p.MaxAttempts calls, waiting with sleep (nil: a timer honouring ctx) between them.
// Any other error (a 4xx, a quota refusal) is returned at once. A Retry-After hint
// longer than p.MaxRetryAfter ends the retries with that error, and so does a wait
// that would end past the context's deadline, with an error that also wraps
// context.DeadlineExceeded (the call cannot be made in time; a fallback model may
// still answer, the context being live). A cancelled context
// ends them too, before the next call or during the wait, with an error wrapping
// ctx.Err(). The Usage it returns, answer or failure, is that of all its calls
// (llm.Model): a failed attempt's tokens were spent too.
func Retry(p RetryPolicy, sleep func(ctx context.Context, d time.Duration) error, logger *slog.Logger) Middleware {
	p = p.withDefaults()
	if sleep == nil {
		sleep = sleepCtx
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return func(next llm.Model) llm.Model {
		return &retrying{Model: next, p: p, sleep: sleep, logger: logger}
	}
}

type retrying struct {
	llm.Model
	p      RetryPolicy
	sleep  func(ctx context.Context, d time.Duration) error
	logger *slog.Logger
}

func (r *retrying) Generate(ctx context.Context, req llm.Request) (llm.Response, error) {
	backoff := r.p.Initial
	var last error         // the previous attempt's
	var spent llm.Response // the Usage of the attempts so far (llm.Model)
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if last != nil {
				return spent, stopped(ctx, last)
			}
			return spent, err
		}
		resp, err := r.Model.Generate(ctx, req)
		spent.Usage = spent.Usage.Add(resp.Usage)
		if err == nil {
			resp.Usage = spent.Usage
			return resp, nil
		}
		last = err
		if ctx.Err() != nil {
			return spent, stopped(ctx, err)
		}
		if !errors.Is(err, llm.ErrTransient) || attempt >= r.p.MaxAttempts {
			return spent, err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if hint, ok := llm.RetryAfter(err); ok {
			if hint > r.p.MaxRetryAfter {
				return spent, fmt.Errorf("%w (Retry-After %s is longer than the %s this gateway waits)", err, hint, r.p.MaxRetryAfter)
			}
			wait = max(wait, hint)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return spent, fmt.Errorf("%w (waiting %s to retry would pass the call's deadline: %w)", err, wait, context.DeadlineExceeded)
		}
		r.logger.Info("retrying model call", "model", r.Name(), "attempt", attempt, "wait", wait, "err", err)
		if r.p.OnRetry != nil {
			r.p.OnRetry(r.Name(), err)
		}
		if serr := r.sleep(ctx, wait); serr != nil {
			return spent, stopped(ctx, fmt.Errorf("%w; waiting %s to retry: %w", err, wait, serr))
		}
		backoff = min(backoff*2, r.p.Max)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
