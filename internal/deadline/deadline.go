// Package deadline hands out contexts that bound calls by a timeout without a
// context and a timer for each call: calls that start close together share one.
// Data enters as a timeout (New) and leaves as contexts (Shared.Context).
package deadline

import (
	"context"
	"sync/atomic"
	"time"
)

// Slack is the part of the timeout a call's deadline may fall short by: a
// sixteenth.
const Slack = 16

// Shared hands out the contexts. One context serves every call that starts within
// timeout/Slack of when it was made, so a call's deadline is between
// timeout-timeout/Slack and timeout after it starts. The contexts are never
// cancelled early; each one's timer ends it at its deadline. It is safe for
// concurrent use.
type Shared struct {
	timeout, slack time.Duration
	cur            atomic.Pointer[made]
}

type made struct {
	ctx context.Context
	at  time.Time
}

// New returns a Shared for timeout.
func New(timeout time.Duration) *Shared {
	return &Shared{timeout: timeout, slack: timeout / Slack}
}

// Context returns a context whose deadline is at most timeout and at least
// timeout-timeout/Slack from now.
func (d *Shared) Context() context.Context {
	now := time.Now()
	if c := d.cur.Load(); c != nil && now.Sub(c.at) < d.slack {
		return c.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(d.timeout))
	_ = cancel // ended by its timer: calls made until then still use it
	d.cur.Store(&made{ctx: ctx, at: now})
	return ctx
}
