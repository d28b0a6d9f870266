//go:build review

package gateway_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
)

// A quota bounds what concurrent calls spend too: calls let through while others
// are in flight count against it before they are answered (an estimate, settled
// with the answer's usage). Today every call that starts before the first answer is
// charged passes the check: twenty calls in flight spend twenty times a quota that
// one call fills.
func TestQuotaBoundsConcurrentCalls(t *testing.T) {
	release := make(chan struct{})
	var entered, refused atomic.Int32
	m := &fakeModel{name: "m", fn: func(int, llm.Request) (llm.Response, error) {
		entered.Add(1)
		<-release
		return answer("x"), nil // 15 tokens
	}}
	q := gateway.Quotas([]gateway.Quota{{Scope: "agent:a", Tokens: 15, Window: time.Hour}}, nil)(m)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.Generate(context.Background(), ask("q")); err != nil {
				refused.Add(1)
			}
		}()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for entered.Load()+refused.Load() < 20 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := entered.Load(); n > 2 {
		t.Fatalf("%d calls let through a quota of 15 tokens that one call of 15 fills", n)
	}
}
