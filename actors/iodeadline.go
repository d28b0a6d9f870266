package actors

import (
	"context"
	"sync/atomic"
	"time"
)

// ioDeadlines hands out the contexts that bound a session's appends and reads. One
// context serves every call that starts within a slack of when it was made, so that
// an append does not make a context and a timer of its own: a call's deadline is
// between timeout-slack and timeout after it starts. The contexts are never
// cancelled early; each one's timer ends it at its deadline.
type ioDeadlines struct {
	timeout, slack time.Duration
	cur            atomic.Pointer[ioDeadline]
}

type ioDeadline struct {
	ctx  context.Context
	made time.Time
}

// ioDeadlineSlack is the part of the timeout a call's deadline may fall short by.
const ioDeadlineSlack = 16

func newIODeadlines(timeout time.Duration) *ioDeadlines {
	return &ioDeadlines{timeout: timeout, slack: timeout / ioDeadlineSlack}
}

// ctx returns a context whose deadline is at most timeout and at least
// timeout-slack from now.
func (d *ioDeadlines) ctx() context.Context {
	now := time.Now()
	if c := d.cur.Load(); c != nil && now.Sub(c.made) < d.slack {
		return c.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(d.timeout))
	_ = cancel // ended by its timer: calls made until then still use it
	d.cur.Store(&ioDeadline{ctx: ctx, made: now})
	return ctx
}
