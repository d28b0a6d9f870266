package node_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// An Idempotency-Key used again for another request that spans namespaces is
// refused before any namespace's share is written: the namespace the key is new to,
// first in the body, does not keep memories of a request answered 422.
func TestMemoryKeyReusedAcrossNamespacesWritesNothing(t *testing.T) {
	mn := newMemoryNode(t, node.Config{})
	mn.mustPost(t, `{"namespace":"user:alice","tier":"semantic","content":"Alice likes tea"}`, "Idempotency-Key", "req-7")
	appends := mn.log.memoryAppends()
	code, ids, msg := mn.post(t, `[{"namespace":"user:carol","tier":"semantic","content":"Carol likes cocoa"},
		{"namespace":"user:alice","tier":"semantic","content":"Alice likes green tea"}]`, "Idempotency-Key", "req-7")
	if code != http.StatusUnprocessableEntity || ids != nil || !strings.Contains(msg, "Idempotency-Key") {
		t.Errorf("a key used again for another request: %d %v %q; want 422 saying so", code, ids, msg)
	}
	if got := mn.log.memoryAppends(); got != appends {
		t.Errorf("the refused request appended %d times", got-appends)
	}
	if got := len(memoryEvents(t, mn.log, "user:carol")); got != 0 {
		t.Errorf("user:carol holds %d events of the refused request; want none", got)
	}

	// A request cut after its first namespace (the log failed on the second),
	// sent again under its key, is still written whole, each memory once.
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close() })
	cut := &failingStream{Log: lg, stream: memory.Stream("user:erin"), fails: 1}
	n := nodetest.Start(t, node.Config{Log: cut, Memory: &memory.Config{Embedder: &countingEmbedder{}}})
	mc := memoryNode{n: n}
	body := `[{"namespace":"user:dave","tier":"semantic","content":"Dave likes mate"},
		{"namespace":"user:erin","tier":"semantic","content":"Erin likes chai"}]`
	if code, ids, msg := mc.post(t, body, "Idempotency-Key", "req-8"); code != http.StatusServiceUnavailable {
		t.Fatalf("the request cut by the log: %d %v %q; want 503", code, ids, msg)
	}
	if got := len(memoryEvents(t, lg, "user:dave")); got != 1 {
		t.Fatalf("user:dave holds %d events of the cut request; want 1", got)
	}
	again := mc.mustPost(t, body, "Idempotency-Key", "req-8")
	if len(again) != 2 || len(memoryEvents(t, lg, "user:dave")) != 1 || len(memoryEvents(t, lg, "user:erin")) != 1 {
		t.Errorf("the retried request: ids %v; dave %d events, erin %d", again, len(memoryEvents(t, lg, "user:dave")), len(memoryEvents(t, lg, "user:erin")))
	}
}

// failingStream is an event log whose appends to stream fail, the first fails times.
type failingStream struct {
	eventlog.Log
	stream string
	mu     sync.Mutex
	fails  int
}

func (l *failingStream) Append(ctx context.Context, events []messages.Envelope) error {
	if len(events) > 0 && events[0].SessionID == l.stream {
		l.mu.Lock()
		fail := l.fails > 0
		l.fails--
		l.mu.Unlock()
		if fail {
			return errors.New("the log is down")
		}
	}
	return l.Log.Append(ctx, events)
}
