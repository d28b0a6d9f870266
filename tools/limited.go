package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
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
//   - the output, and an error's text, are made UTF-8 as the event log records
//     them (asRecorded), so that a session folds the same text live as when it
//     is recovered, and cut to MaxOutput (Truncate): an error so cut is its
//     text, with its note, and no longer wraps anything.
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
		if msg := err.Error(); !utf8.ValidString(msg) {
			err = &recordedError{msg: asRecorded(msg), err: err}
		}
		if msg := err.Error(); len(msg) > lim.MaxOutput {
			err = errors.New(Truncate(msg, lim.MaxOutput))
		}
	}
	return Truncate(asRecorded(out), lim.MaxOutput), err
}

// asRecorded returns s as JSON records it, and so as the event log gives it back:
// each byte that is not part of UTF-8 text becomes U+FFFD, as encoding/json writes
// it (strings.ToValidUTF8 would make a run of them one).
func asRecorded(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// recordedError is an error whose text is made UTF-8 (asRecorded) and that still
// wraps the tool's.
type recordedError struct {
	msg string
	err error
}

func (e *recordedError) Error() string { return e.msg }
func (e *recordedError) Unwrap() error { return e.err }
