package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

func TestRetryRetriesTransientFailuresWithBackoffAndRetryAfter(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(n int, _ llm.Request) (llm.Response, error) {
		switch n {
		case 1:
			return llm.Response{}, &llm.APIError{StatusCode: 429, RetryAfter: 3 * time.Second}
		case 2:
			return llm.Response{}, fmt.Errorf("wrapped: %w", &llm.APIError{StatusCode: 503})
		}
		return answer("ok"), nil
	}}
	s := &sleeps{}
	r, err := gateway.Retry(gateway.RetryPolicy{Initial: 100 * time.Millisecond}, s.sleep, nil)(m).Generate(context.Background(), ask("q"))
	if err != nil || r.Message.Content != "ok" || m.calls.Load() != 3 {
		t.Fatalf("%+v %v calls=%d", r, err, m.calls.Load())
	}
	// The first wait is the Retry-After hint (longer than the 100ms backoff); the
	// second the doubled backoff, 200ms, drawn from [100ms, 200ms).
	if len(s.waits) != 2 || s.waits[0] != 3*time.Second || s.waits[1] < 100*time.Millisecond || s.waits[1] >= 200*time.Millisecond {
		t.Fatalf("waits %v", s.waits)
	}
}

func TestRetryBackoffDoublesUpToMaxAndGivesUpAfterMaxAttempts(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 500} }}
	s := &sleeps{}
	_, err := gateway.Retry(gateway.RetryPolicy{MaxAttempts: 5, Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond}, s.sleep, nil)(m).
		Generate(context.Background(), ask("q"))
	var api *llm.APIError
	if !errors.As(err, &api) || api.StatusCode != 500 || m.calls.Load() != 5 {
		t.Fatalf("err %v, calls %d: want the last 500 after 5 calls", err, m.calls.Load())
	}
	bounds := [][2]time.Duration{{50, 100}, {100, 200}, {150, 300}, {150, 300}} // ms: [d/2, d) for d = 100, 200, 300 (Max), 300
	if len(s.waits) != len(bounds) {
		t.Fatalf("waits %v", s.waits)
	}
	for i, b := range bounds {
		if s.waits[i] < b[0]*time.Millisecond || s.waits[i] >= b[1]*time.Millisecond {
			t.Fatalf("wait %d is %v, want in [%dms, %dms): %v", i, s.waits[i], b[0], b[1], s.waits)
		}
	}
}

func TestRetryDoesNotRetryWhatCannotSucceed(t *testing.T) {
	for name, fail := range map[string]error{
		"bad request":   &llm.APIError{StatusCode: 400, Message: "context too long"},
		"quota refusal": fmt.Errorf("%w for agent:a: 50 of 40 tokens used in the last 1h0m0s", gateway.ErrQuotaExceeded),
		"plain error":   errors.New("no route to host"),
		"unauthorized":  &llm.APIError{StatusCode: 401},
		"a 404 wrapped": fmt.Errorf("call: %w", &llm.APIError{StatusCode: 404}),
		"unprocessable": &llm.APIError{StatusCode: 422},
	} {
		t.Run(name, func(t *testing.T) {
			m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, fail }}
			s := &sleeps{}
			_, err := gateway.Retry(gateway.RetryPolicy{}, s.sleep, nil)(m).Generate(context.Background(), ask("q"))
			if !errors.Is(err, fail) || m.calls.Load() != 1 || len(s.waits) != 0 {
				t.Fatalf("err %v, calls %d, waits %v", err, m.calls.Load(), s.waits)
			}
		})
	}
}

func TestRetryAfterLongerThanTheGatewayWaitsEndsTheRetries(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{StatusCode: 429, RetryAfter: 2 * time.Minute}
	}}
	s := &sleeps{}
	_, err := gateway.Retry(gateway.RetryPolicy{MaxRetryAfter: time.Minute}, s.sleep, nil)(m).Generate(context.Background(), ask("q"))
	if !errors.Is(err, llm.ErrTransient) || !strings.Contains(err.Error(), "Retry-After 2m0s is longer than the 1m0s") || m.calls.Load() != 1 || len(s.waits) != 0 {
		t.Fatalf("err %v, calls %d, waits %v", err, m.calls.Load(), s.waits)
	}
}

// A cancelled context interrupts the wait between attempts at once (the backoff is an
// hour), and the error says so.
func TestRetryStopsWaitingWhenTheContextIsCancelled(t *testing.T) {
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 503} }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for m.calls.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	retrying := gateway.Retry(gateway.RetryPolicy{MaxAttempts: 10, Initial: time.Hour, Max: time.Hour}, nil, nil)(m) // nil: the real, ctx-aware sleep
	_, err := generateWithin(t, retrying, ctx, ask("q"))
	if !errors.Is(err, context.Canceled) || m.calls.Load() != 1 {
		t.Fatalf("err %v, calls %d", err, m.calls.Load())
	}
	var api *llm.APIError
	if !errors.As(err, &api) {
		t.Fatalf("the last attempt's error must be kept: %v", err)
	}
}

// A call whose context is cancelled while the model answers is not retried, and the
// error wraps ctx.Err() besides the model's own.
func TestRetryStopsWhenTheContextIsCancelledDuringACall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		cancel()
		return llm.Response{}, &llm.APIError{StatusCode: 503}
	}}
	s := &sleeps{}
	_, err := gateway.Retry(gateway.RetryPolicy{MaxAttempts: 10}, s.sleep, nil)(m).Generate(ctx, ask("q"))
	var api *llm.APIError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &api) || m.calls.Load() != 1 || len(s.waits) != 0 {
		t.Fatalf("err %v, calls %d, waits %v", err, m.calls.Load(), s.waits)
	}
	if _, err := gateway.Retry(gateway.RetryPolicy{}, s.sleep, nil)(m).Generate(ctx, ask("q")); !errors.Is(err, context.Canceled) || m.calls.Load() != 1 {
		t.Fatalf("a call with a cancelled context must not reach the model: err %v, calls %d", err, m.calls.Load())
	}
}
