package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// limitedTool calls call under limits.
type limitedTool struct {
	limits tools.CallLimits
	call   func(ctx context.Context, c tools.Call) (string, error)
}

func (l limitedTool) Spec() messages.ToolSpec                                { return messages.ToolSpec{Name: "limited"} }
func (l limitedTool) Limits() tools.CallLimits                               { return l.limits }
func (l limitedTool) Call(ctx context.Context, c tools.Call) (string, error) { return l.call(ctx, c) }

var errTool = errors.New("the tool failed")

// CallLimited applies a tool's limits as a session's performer and a chain's step
// both do: arguments past MaxArguments are refused unread with an ArgumentError,
// a call past its Timeout ends with an error naming the timeout, an error or an
// output past MaxOutput is cut to it (Truncate), and what is within its limits
// is the tool's own.
func TestCallLimited(t *testing.T) {
	ctx := context.Background()
	called := false
	echo := limitedTool{limits: tools.CallLimits{MaxArguments: 10, MaxOutput: 100}, call: func(_ context.Context, c tools.Call) (string, error) {
		called = true
		return c.Arguments, nil
	}}
	t.Run("arguments", func(t *testing.T) {
		out, err := tools.CallLimited(ctx, echo, "offered_as", tools.Call{Arguments: `{"q": "long"}`})
		var ae *tools.ArgumentError
		if !errors.As(err, &ae) || ae.Tool != "offered_as" || ae.Reason != "the arguments are 13 bytes long; the limit is 10" || out != "" {
			t.Fatalf("CallLimited = %q, %v; want an ArgumentError for offered_as, 13 bytes of 10", out, err)
		}
		if !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("%v is not ErrInvalidArguments", err)
		}
		// Sessions record this text, and their fold reads the arguments' length in
		// it (actors/state.go's refusedForLength): a replay cuts a refused call by
		// it, so the text stays as it is.
		if want := "offered_as: invalid arguments: the arguments are 13 bytes long; the limit is 10"; err.Error() != want {
			t.Errorf("the refusal reads %q, want %q as sessions recorded it", err, want)
		}
		if called {
			t.Error("the tool was called with arguments past its bound")
		}
		if out, err := tools.CallLimited(ctx, echo, "offered_as", tools.Call{Arguments: `{"q": 1}`}); out != `{"q": 1}` || err != nil {
			t.Errorf("within the bound: %q, %v", out, err)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		wait := limitedTool{limits: tools.CallLimits{Timeout: time.Millisecond}, call: func(ctx context.Context, _ tools.Call) (string, error) {
			select {
			case <-ctx.Done():
				return "partial", ctx.Err()
			case <-time.After(10 * time.Second):
				return "", errors.New("nobody cut the call short")
			}
		}}
		out, err := tools.CallLimited(ctx, wait, "wait", tools.Call{})
		if err == nil || err.Error() != "tool timed out after 1ms: context deadline exceeded" {
			t.Fatalf("CallLimited = %q, %v; want the timeout named", out, err)
		}
		if !errors.Is(err, tools.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || out != "partial" {
			t.Errorf("err %v: want it to be ErrTimeout and the tool's error, with the tool's output (%q)", err, out)
		}
	})
	t.Run("error", func(t *testing.T) {
		long := strings.Repeat("x", 300)
		fail := limitedTool{limits: tools.CallLimits{MaxOutput: 100}, call: func(context.Context, tools.Call) (string, error) {
			return "", errors.New(long)
		}}
		_, err := tools.CallLimited(ctx, fail, "fail", tools.Call{})
		if want := tools.Truncate(long, 100); err == nil || err.Error() != want {
			t.Fatalf("err = %v, want it cut to %q", err, want)
		}
		short := limitedTool{limits: tools.CallLimits{MaxOutput: 100}, call: func(context.Context, tools.Call) (string, error) {
			return "", errTool
		}}
		if _, err := tools.CallLimited(ctx, short, "short", tools.Call{}); err != errTool {
			t.Errorf("an error within the bound: %v, want the tool's own", err)
		}
	})
	t.Run("output", func(t *testing.T) {
		long := strings.Repeat("y", 300)
		big := limitedTool{limits: tools.CallLimits{MaxOutput: 100}, call: func(context.Context, tools.Call) (string, error) {
			return long, nil
		}}
		out, err := tools.CallLimited(ctx, big, "big", tools.Call{})
		if want := tools.Truncate(long, 100); err != nil || out != want || !strings.Contains(out, "[truncated: 300 bytes, showing the first 100]") {
			t.Errorf("CallLimited = %q, %v; want %q", out, err, want)
		}
	})
}

// What a tool returns is recorded as JSON, which holds UTF-8 only: CallLimited
// hands on the output and the error text as the event log will give them back
// (each byte that is not UTF-8 a U+FFFD, as encoding/json writes it), so a session
// folds the same text live as when it is recovered from its log.
func TestCallLimitedReturnsTextAsRecorded(t *testing.T) {
	raw := "ok \xff\xfe é \xc3"
	bad := limitedTool{limits: tools.CallLimits{MaxArguments: 100, MaxOutput: 100}, call: func(context.Context, tools.Call) (string, error) {
		return raw, fmt.Errorf("%w: bad \xff", errTool)
	}}
	out, err := tools.CallLimited(context.Background(), bad, "bad", tools.Call{})
	b, _ := json.Marshal(raw)
	var recorded string
	if jerr := json.Unmarshal(b, &recorded); jerr != nil {
		t.Fatal(jerr)
	}
	if out != recorded {
		t.Errorf("out = %q, want it as recorded: %q", out, recorded)
	}
	if err == nil || !utf8.ValidString(err.Error()) || !errors.Is(err, errTool) || err.Error() != "the tool failed: bad \uFFFD" {
		t.Errorf("err = %q (%v), want valid UTF-8 that still wraps the tool's error", err, err)
	}
}
