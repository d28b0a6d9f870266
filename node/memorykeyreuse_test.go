package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/node"
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

	// A request cut after its first namespace, sent again under its key, is still
	// written whole.
	body := `[{"namespace":"user:dave","tier":"semantic","content":"Dave likes mate"},
		{"namespace":"user:erin","tier":"semantic","content":"Erin likes chai"}]`
	first := mn.mustPost(t, `{"namespace":"user:dave","tier":"semantic","content":"Dave likes mate"}`, "Idempotency-Key", "req-8")
	again := mn.mustPost(t, body, "Idempotency-Key", "req-8")
	if again[0] != first[0] || len(memoryEvents(t, mn.log, "user:erin")) != 1 {
		t.Errorf("the retried request: ids %v (first %v)", again, first)
	}
}
