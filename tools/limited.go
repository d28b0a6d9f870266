package tools

import (
	"context"
	"errors"
	"fmt"
)

// ErrTimeout is the cause of a call's context ended by its tool's timeout
// (CallLimits.Timeout, CallLimited): "tool timed out after 30s" answers
// errors.Is(err, ErrTimeout).
var ErrTimeout = errors.New("tool timed out")

// CallLimited calls t, named name where it is offered, under its own limits
// (LimitsOf), as a session's performer (package actors) and a chain's step run it:
//
//   - arguments longer than MaxArguments are refused unread, with an
//     *ArgumentError naming the tool and both lengths;
//   - with a Timeout, the call's context ends after it (sooner if ctx does), its
//     cause a timeout error (ErrTimeout) that names the timeout; an error the call
//     returns once its context has ended is wrapped with that cause first
//     (context.Cause), so it says why;
//   - the output, and an error's text, are cut to MaxOutput (Truncate): an error
//     so cut is its text, with its note, and no longer wraps anything.
//
// It returns the tool's output even with an error, as the tool returned it
// (truncated). It does not recover a panic: that is the performer's to answer.
func CallLimited(ctx context.Context, t Tool, name string, c Call) (string, error) {
	lim := LimitsOf(t)
	if n := len(c.Arguments); n > lim.MaxArguments {
		return "", &ArgumentError{Tool: name, Reason: fmt.Sprintf("the arguments are %d bytes long; the limit is %d", n, lim.MaxArguments)}
	}
	if lim.Timeout > 0 {
		// Under a context that ends no later (a performer's own timer for the same
		// timeout), this makes no timer of its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, lim.Timeout, fmt.Errorf("%w after %s", ErrTimeout, lim.Timeout))
		defer cancel()
	}
	out, err := t.Call(ctx, c)
	if err != nil {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		if msg := err.Error(); len(msg) > lim.MaxOutput {
			err = errors.New(Truncate(msg, lim.MaxOutput))
		}
	}
	return Truncate(out, lim.MaxOutput), err
}
