package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// A wait before a retry that would outlast the call's deadline is not waited: the
// error is returned at once, so that the next model of the chain answers while
// there is time (a node's model calls run under ModelTimeout), rather than the
// call sleeping into its deadline with a backup never tried.
func TestRetryDoesNotWaitPastTheDeadlineAndTheBackupAnswers(t *testing.T) {
	primary := &fakeModel{name: "primary", fn: func(int, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.APIError{StatusCode: 429, RetryAfter: 30 * time.Second}
	}}
	backup := &fakeModel{name: "backup", fn: func(int, llm.Request) (llm.Response, error) { return answer("from backup"), nil }}
	var waited []time.Duration
	// A timer honouring ctx, except that a wait within the deadline returns at once.
	sleep := func(ctx context.Context, d time.Duration) error {
		waited = append(waited, d)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	g, err := gateway.New(gateway.Config{Chain: []llm.Model{primary, backup}, Sleep: sleep})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	r, err := g.Generate(ctx, ask("q"))
	if err != nil || r.Message.Content != "from backup" {
		t.Fatalf("got %+v, %v (waits %v): want the backup's answer", r, err, waited)
	}
	if len(waited) != 0 || primary.calls.Load() != 1 {
		t.Fatalf("waits %v, primary calls %d: want no wait past the deadline, one call", waited, primary.calls.Load())
	}
}
