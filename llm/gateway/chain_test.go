package gateway_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// generateWithin runs g.Generate and fails the test if it has not returned within a
// deadline far longer than any test needs (the backoffs these tests configure are
// hours long: a layer that does not stop on cancellation would wait them out).
func generateWithin(t *testing.T, m llm.Model, ctx context.Context, req llm.Request) (llm.Response, error) {
	t.Helper()
	type result struct {
		r   llm.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := m.Generate(ctx, req)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-time.After(10 * time.Second):
		t.Fatal("Generate did not return after its context was cancelled")
		return llm.Response{}, nil
	}
}

// A call cancelled while a model is answering stops every layer: no retry, no sleep,
// no fallback, and the error says it was cancelled even though the model's own error
// did not.
func TestCancellationDuringACallStopsEveryLayer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	primary := &fakeModel{name: "primary", fn: func(int, llm.Request) (llm.Response, error) {
		cancel()
		return llm.Response{}, &llm.APIError{StatusCode: 503}
	}}
	backup := &fakeModel{name: "backup", fn: func(int, llm.Request) (llm.Response, error) { return answer("late"), nil }}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{primary, backup},
		Retry: gateway.RetryPolicy{MaxAttempts: 100, Initial: time.Hour, Max: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = generateWithin(t, g, ctx, ask("q"))
	if !errors.Is(err, context.Canceled) || primary.calls.Load() != 1 || backup.calls.Load() != 0 {
		t.Fatalf("err %v, primary calls %d, backup calls %d", err, primary.calls.Load(), backup.calls.Load())
	}
	var api *llm.APIError
	if !errors.As(err, &api) {
		t.Fatalf("the model's error must still be in the chain: %v", err)
	}
}

// A Sleep that ignores its context (as a test's may) does not make the retry layer
// call the model again once the context is cancelled; nor does a call made with a
// cancelled context ever reach the model.
func TestCancelledContextNeverReachesTheModel(t *testing.T) {
	for i := 0; i < 20; i++ {
		m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) { return llm.Response{}, &llm.APIError{StatusCode: 503} }}
		ctx, cancel := context.WithCancel(context.Background())
		g, err := gateway.New(gateway.Config{Chain: []llm.Model{m}, Retry: gateway.RetryPolicy{MaxAttempts: 3},
			Sleep: func(context.Context, time.Duration) error { cancel(); return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := generateWithin(t, g, ctx, ask("q")); !errors.Is(err, context.Canceled) || m.calls.Load() != 1 {
			t.Fatalf("run %d: err %v, calls %d: want context.Canceled after 1 call", i, err, m.calls.Load())
		}
		if _, err := generateWithin(t, g, ctx, ask("q")); !errors.Is(err, context.Canceled) || m.calls.Load() != 1 {
			t.Fatalf("run %d: a cancelled context reached the model: err %v, calls %d", i, err, m.calls.Load())
		}
	}
}
