package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
)

// testMilvus returns the address of the Milvus server of TROUPE_TEST_MILVUS, or
// skips the test (fails it under CI=true, where the server must be there).
func testMilvus(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("TROUPE_TEST_MILVUS")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TROUPE_TEST_MILVUS is not set under CI: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait)")
		}
		t.Skip("TROUPE_TEST_MILVUS is not set: start Milvus (deploy/milvus.sh start && deploy/milvus.sh wait) and set TROUPE_TEST_MILVUS=127.0.0.1:19530")
	}
	return addr
}

// The kill -9 test of memory on Milvus (node serve --milvus): writers post batches
// of memories, each with its Idempotency-Key, until the node is killed; the next
// node, on the same data directory and the same Milvus, has every acknowledged
// memory once in the log and once in Milvus, finds each by vector, and the
// requests in flight at the kill, sent again, add nothing twice.
func TestMemoryKillNineOnMilvus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills node processes")
	}
	addr := testMilvus(t)
	memoryCLIEnv(t)
	dir := t.TempDir()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// The node uses the default collections (troupe_mem_*): a namespace of the
	// test's own keeps it apart, and its vectors are deleted at the end.
	ns := "user:crash-" + hex.EncodeToString(b)
	const writers, batch = 2, 5
	// Words of their own per memory, so that no two look alike to the consolidator's
	// dedupe (which runs in the background, every 50 writes).
	word := func(i, j int) string {
		return fmt.Sprintf("w%x", sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", ns, i, j)))[:11]
	}
	content := func(i int) string {
		return fmt.Sprintf("milvus crash memory %d: %s %s %s %s", i, word(i, 0), word(i, 1), word(i, 2), word(i, 3))
	}
	body := func(r int) string {
		var items []string
		for i := r * batch; i < (r+1)*batch; i++ {
			items = append(items, fmt.Sprintf(`{"namespace":%q,"tier":"episodic","content":%q}`, ns, content(i)))
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	key := func(r int) string { return fmt.Sprintf("crash-%05d", r) }
	start := func() *child {
		script := filepath.Join(dir, "script.json")
		if err := os.WriteFile(script, []byte(`{"name":"scripted","steps":[{"content":"ok"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		return startChildWith(t, dir, script, filepath.Join(dir, "records.txt"), filepath.Join(dir, "model.txt"),
			[]string{"TROUPE_MILVUS="}, "--milvus", addr)
	}

	first := start()
	type sent struct {
		r   int
		ids []string
	}
	acked, inFlight, failures := make(chan sent, 10_000), make(chan int, writers), make(chan string, writers)
	for w := range writers {
		go func() {
			for r := w; ; r += writers {
				code, ids, err := postMemory(first, key(r), body(r))
				if err != nil || code != http.StatusCreated || len(ids) != batch {
					if err == nil {
						failures <- fmt.Sprintf("request %d: %d %v", r, code, ids)
					}
					inFlight <- r
					return
				}
				acked <- sent{r, ids}
			}
		}()
	}
	deadline := time.After(60 * time.Second)
	for len(acked) < 10 {
		select {
		case f := <-failures:
			t.Fatalf("before the kill: %s\n%s", f, first.stderr.String())
		case <-deadline:
			t.Fatalf("only %d requests acknowledged in 60 s:\n%s", len(acked), first.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	first.kill9(t)
	var pending []int
	for range writers {
		select {
		case r := <-inFlight:
			pending = append(pending, r)
		case <-time.After(20 * time.Second):
			t.Fatal("a writer did not notice the kill in 20 s")
		}
	}
	close(acked)
	select {
	case f := <-failures:
		t.Fatalf("a write failed before the kill: %s", f)
	default:
	}
	ids := map[int]string{} // memory number -> ID
	for s := range acked {
		for j, id := range s.ids {
			ids[s.r*batch+j] = id
		}
	}
	acknowledged := len(ids)

	second := start()
	defer second.stop()
	for _, r := range pending {
		code, got, err := postMemory(second, key(r), body(r))
		if err != nil || code != http.StatusCreated || len(got) != batch {
			t.Fatalf("retry of request %d: %d %v %v", r, code, got, err)
		}
		for j, id := range got {
			ids[r*batch+j] = id
		}
	}

	// The log: each memory once.
	byContent := map[string]int{}
	for _, a := range addedIn(t, memoryEvents(t, filepath.Join(dir, "data"), ns)) {
		byContent[a.Memory.Content]++
	}
	for i := range ids {
		if byContent[content(i)] != 1 {
			t.Errorf("memory %d is in the log %d times, want once", i, byContent[content(i)])
		}
	}
	if len(byContent) != len(ids) {
		t.Errorf("%d memories in the log, want the %d acknowledged and retried", len(byContent), len(ids))
	}
	// Search finds every one by vector alone.
	for i, id := range ids {
		var res struct{ Results []node.SearchHit }
		url := fmt.Sprintf("http://%s/v1/memories/search?namespace=%s&q=%s&limit=1&mode=vector", second.addr, ns, neturl.QueryEscape(content(i)))
		if code := getJSON(t, url, &res); code != http.StatusOK || len(res.Results) != 1 || res.Results[0].ID != id {
			t.Errorf("vector search for memory %d (%s): %d %+v", i, id, code, res.Results)
		}
	}
	// Milvus holds each memory's vector once, and nothing else of the namespace.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := milvus.New(ctx, milvus.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	coll := memory.Collection(memory.Episodic, memory.Text)
	var want []string
	for _, id := range ids {
		want = append(want, ns+"/"+id)
	}
	defer func() { _ = st.Delete(context.Background(), coll, want) }()
	q, err := llm.HashingEmbedder{}.Embed(ctx, []string{"milvus crash memory"})
	if err != nil {
		t.Fatal(err)
	}
	hits, err := st.Search(ctx, coll, vectorstore.Query{Vector: q[0], K: 10 * len(want), Filter: map[string]string{"ns": ns}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hits {
		got = append(got, h.ID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Milvus holds %d vectors of the namespace, want the %d memories' once each:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	t.Logf("acknowledged before the kill: %d memories; in flight: %d requests; after the retries: %d memories, %d vectors in Milvus",
		acknowledged, len(pending), len(ids), len(got))
}
