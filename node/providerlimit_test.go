package node_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// acmeModel is a model of provider "acme" named "acme-large" (as an
// OpenAI-compatible one is: provider deepseek, model deepseek-chat) that counts
// the calls it answers at once.
type acmeModel struct {
	llm.Offline
	inFlight, most atomic.Int32
}

func (m *acmeModel) Name() string     { return "acme-large" }
func (m *acmeModel) Provider() string { return "acme" }

func (m *acmeModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	n := m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	for {
		most := m.most.Load()
		if n <= most || m.most.CompareAndSwap(most, n) {
			break
		}
	}
	select {
	case <-time.After(50 * time.Millisecond): // long enough for the others to come
	case <-ctx.Done():
		return llm.Response{}, ctx.Err()
	}
	return m.Offline.Generate(ctx, r)
}

// The gateway's "concurrency" is per provider ("concurrency": {"deepseek": 16},
// as the README's example writes it): the node's model calls keep to it. The node
// wraps each model in the ReAct text protocol's adapter before the gateway, which
// hid the model's provider: its calls were limited per model name instead, so a
// limit keyed by the provider's name, the documented key, was never applied.
func TestNodeKeepsToTheProvidersConcurrencyLimit(t *testing.T) {
	m := &acmeModel{}
	n := nodetest.Start(t, node.Config{Model: m, Gateway: gateway.Config{Concurrency: map[string]int{"acme": 1}}})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodetest.Run(t, n, fmt.Sprintf("limit-%d", i), "What is 6 times 7?")
		}()
	}
	wg.Wait()
	if most := m.most.Load(); most != 1 {
		t.Fatalf("%d calls of provider acme at once; its concurrency limit is 1", most)
	}
}
