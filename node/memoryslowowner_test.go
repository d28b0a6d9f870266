package node_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
)

// On a sharded cluster, a write (or a search) whose namespace's owner embeds
// slowly is answered once the owner answers, as on one node (POST /v1/memories
// waits up to 10 minutes for its write, a search as long for its embedder): the
// sender gave up after 30 seconds (memoryTimeout, here shortened), answering 503
// "did not answer" for memories the owner went on to store.
func TestMemoryClusterWriteSlowerThanTheCommandTimeoutIsAnswered(t *testing.T) {
	node.ShortenMemoryWait(t, 500*time.Millisecond)
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	slow := func(c *node.Config) { c.Memory = &memory.Config{Embedder: slowEmbedder{pause: 2 * time.Second}} }
	a := startMemoryClusterNode(t, k, group, shared, "a", slow)
	b := startMemoryClusterNode(t, k, group, shared, "b", slow)
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")
	code, ids, msg := a.post(t, `{"namespace":"`+ns+`","tier":"semantic","content":"Carol works at the Lisbon office"}`, "Idempotency-Key", "slow-1")
	if code != http.StatusCreated || len(ids) != 1 {
		t.Fatalf("a write its owner embeds slowly: %d %v %q; want 201 with its id", code, ids, msg)
	}
	if code, ans := a.search(t, url.Values{"namespace": {ns}, "q": {"Lisbon office"}}); code != http.StatusOK || len(ans.Results) == 0 || ans.Results[0].ID != ids[0] {
		t.Fatalf("a search its owner embeds slowly: %d %+v", code, ans)
	}
}
