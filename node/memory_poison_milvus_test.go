package node_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// oddEmbedder is the offline embedder, except that it gives a text containing
// "POISON" a vector of dimension 3: one vector its collection refuses.
type oddEmbedder struct{}

func (oddEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	vs, err := llm.HashingEmbedder{}.Embed(ctx, texts)
	for i, t := range texts {
		if err == nil && strings.Contains(t, "POISON") {
			vs[i] = []float32{1, 2, 3}
		}
	}
	return vs, err
}

// On real Milvus, a memory whose vector Milvus refuses (another dimension than its
// collection's) holds up nothing: the other memories of its write and the later
// ones reach Milvus and a search by vector finds them, the refused one is counted
// as parked on /metrics and still found by keyword, and nothing waits for the store.
func TestMemoryPoisonVectorOnMilvus(t *testing.T) {
	addr := milvusAddr(t)
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	mn := memoryNode{log: newCountingLog(base), emb: &countingEmbedder{}}
	mn.n = nodetest.Start(t, node.Config{Log: mn.log, Memory: &memory.Config{Vectors: newMilvusStore(t, addr, milvusPrefix(t, addr)), Embedder: oddEmbedder{}}})
	const ns = "user:gus"
	first := mn.mustPost(t, `[{"namespace":"user:gus","tier":"semantic","content":"Gus repairs clocks"},
		{"namespace":"user:gus","tier":"semantic","content":"POISON Gus fears wasps"},
		{"namespace":"user:gus","tier":"semantic","content":"Gus cycles to Lyon"}]`)
	later := mn.mustPost(t, `{"namespace":"user:gus","tier":"semantic","content":"Gus bakes rye bread"}`)
	for _, c := range []struct {
		q    string
		want string
	}{{"Gus repairs clocks", first[0]}, {"Gus cycles to Lyon", first[2]}, {"Gus bakes rye bread", later[0]}} {
		if code, found, msg := mn.vectorSearch(t, ns, c.q); code != http.StatusOK || len(found) != 1 || found[0] != c.want {
			t.Errorf("vector search %q: %d %v %s, want [%s]", c.q, code, found, msg, c.want)
		}
	}
	code, body := mn.do(t, http.MethodGet, "/v1/memories/search?namespace=user:gus&q=wasps&mode=keyword", "", nil)
	if code != http.StatusOK || !strings.Contains(string(body), first[1]) {
		t.Errorf("keyword search for the refused memory: %d %s, want it found", code, body)
	}
	if w, p := mn.metric(t, `troupe_vectors_waiting{kind="memory"}`), mn.metric(t, `troupe_vectors_parked_total{kind="memory"}`); w != "0" || p != "1" {
		t.Errorf("/metrics: waiting %q, parked %q; want 0 and 1", w, p)
	}
}
