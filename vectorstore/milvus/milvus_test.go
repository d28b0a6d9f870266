package milvus_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	mathrand "math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/milvus"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

// envAddr holds the gRPC address of a Milvus server, such as 127.0.0.1:19530.
const envAddr = "TROUPE_TEST_MILVUS"

// serverAddr returns the server's address, or skips the test.
func serverAddr(t *testing.T) string {
	t.Helper()
	addr := os.Getenv(envAddr)
	if addr == "" {
		t.Skipf("%s is not set: start Milvus (deploy/milvus.sh install && deploy/milvus.sh start && deploy/milvus.sh wait) and set %s=127.0.0.1:19530 to run this test",
			envAddr, envAddr)
	}
	return addr
}

// testPrefix returns a collection name prefix of the test's own; the collections
// under it are dropped when the test ends.
func testPrefix(t *testing.T, addr string) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	prefix := "troupe_test_" + hex.EncodeToString(b) + "_"
	t.Cleanup(func() { dropPrefix(t, addr, prefix) })
	return prefix
}

// dropPrefix drops every collection whose name starts with prefix.
func dropPrefix(t testing.TB, addr, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.NewClient(ctx, client.Config{Address: addr})
	if err != nil {
		t.Errorf("cleanup: connect: %v", err)
		return
	}
	defer c.Close()
	colls, err := c.ListCollections(ctx)
	if err != nil {
		t.Errorf("cleanup: list collections: %v", err)
		return
	}
	for _, coll := range colls {
		if strings.HasPrefix(coll.Name, prefix) {
			if err := c.DropCollection(ctx, coll.Name); err != nil {
				t.Errorf("cleanup: drop %s: %v", coll.Name, err)
			}
		}
	}
}

func newStore(t *testing.T, cfg milvus.Config) *milvus.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := milvus.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// The server-backed tests run in parallel: each has its own prefix, and most of
// their time is spent waiting for the server's time ticks, not computing.

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance(t, milvus.Strong)
}

// Session consistency passes the suite too: a Store reads its own writes.
func TestConformanceSession(t *testing.T) {
	t.Parallel()
	conformance(t, milvus.Session)
}

func conformance(t *testing.T, level milvus.Consistency) {
	addr := serverAddr(t)
	cfgs := make(map[vectorstore.Store]milvus.Config) // store -> its config, for Reopen
	vectorstoretest.Run(t, vectorstoretest.Features{
		// The data lives on the server: a new Store with the same prefix sees it.
		Reopen: func(t *testing.T, s vectorstore.Store) vectorstore.Store {
			if err := s.(*milvus.Store).Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			cfg := cfgs[s]
			re := newStore(t, cfg)
			cfgs[re] = cfg
			return re
		},
	}, func(t *testing.T) vectorstore.Store {
		cfg := milvus.Config{Addr: addr, Prefix: testPrefix(t, addr), Consistency: level}
		s := newStore(t, cfg)
		cfgs[s] = cfg
		return s
	})
}

// hostile are metadata keys and values that a naive expression would break on.
var hostile = []string{
	`"`, `'`, `\`, `\"`, `"]`, `["`, `][`, `a"b`, `a'b`, `back\slash`, `\n`, "new\nline",
	"tab\there", "nul\x00byte", `" or 1==1 or "`, `') or true or ('`, `metadata["k"]`,
	"ünïcödé", "日本語", "emoji 🦀", "\u2028", "/", "~", "~1", "$.x", "", " ", "a b",
}

// Filters on hostile keys and values select exactly the item that holds them, and the
// metadata comes back byte for byte.
func TestHostileMetadata(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	// Session: the test reads only its own writes, and its 57 searches stay quick.
	s := newStore(t, milvus.Config{Addr: addr, Prefix: testPrefix(t, addr), Consistency: milvus.Session})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var items []vectorstore.Item
	for i, h := range hostile {
		items = append(items,
			vectorstore.Item{ID: fmt.Sprintf("key%02d", i), Vector: []float32{1, float32(i)}, Metadata: map[string]string{h: "v"}, Text: h},
			vectorstore.Item{ID: fmt.Sprintf("val%02d", i), Vector: []float32{1, float32(-i)}, Metadata: map[string]string{"k": h}, Text: h},
		)
	}
	items = append(items, vectorstore.Item{ID: `id "with" \quotes\ and ünï`, Vector: []float32{0, 1}, Metadata: map[string]string{"k": "id"}})
	if err := s.Upsert(ctx, "hostile", items); err != nil {
		t.Fatalf("Upsert: %v", err)
	}
	for i, h := range hostile {
		for _, tc := range []struct {
			filter map[string]string
			want   string
		}{
			{map[string]string{h: "v"}, fmt.Sprintf("key%02d", i)},
			{map[string]string{"k": h}, fmt.Sprintf("val%02d", i)},
		} {
			hits, err := s.Search(ctx, "hostile", vectorstore.Query{Vector: []float32{1, 0}, K: 100, Filter: tc.filter})
			if err != nil {
				t.Errorf("filter %q: %v", tc.filter, err)
				continue
			}
			if len(hits) != 1 || hits[0].ID != tc.want {
				t.Errorf("filter %q: hits %v, want only %s", tc.filter, hitIDs(hits), tc.want)
				continue
			}
			want := items[slices.IndexFunc(items, func(it vectorstore.Item) bool { return it.ID == tc.want })]
			if !maps.Equal(hits[0].Metadata, want.Metadata) || hits[0].Text != want.Text {
				t.Errorf("filter %q: got metadata %q text %q, want %q %q", tc.filter, hits[0].Metadata, hits[0].Text, want.Metadata, want.Text)
			}
		}
	}
	// A hostile ID can be deleted by its ID.
	id := items[len(items)-1].ID
	if err := s.Delete(ctx, "hostile", []string{id, `"`, `\`}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	hits, err := s.Search(ctx, "hostile", vectorstore.Query{Vector: []float32{0, 1}, K: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(hitIDs(hits), id) || len(hits) != len(items)-1 {
		t.Errorf("after deleting %q: %d hits, want %d without it", id, len(hits), len(items)-1)
	}
}

// Names longer than Milvus allows once prefixed get a hashed name of their own.
func TestLongCollectionNames(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	s := newStore(t, milvus.Config{Addr: addr, Prefix: testPrefix(t, addr)})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	a := strings.Repeat("a", 255)
	b := strings.Repeat("a", 254) + "b" // same cut, other hash
	for i, name := range []string{a, b} {
		if err := s.Upsert(ctx, name, []vectorstore.Item{{ID: "x", Vector: []float32{1, 0}, Text: name}}); err != nil {
			t.Fatalf("Upsert %d: %v", i, err)
		}
	}
	for _, name := range []string{a, b} {
		hits, err := s.Search(ctx, name, vectorstore.Query{Vector: []float32{1, 0}, K: 5})
		if err != nil || len(hits) != 1 || hits[0].Text != name {
			t.Errorf("collection %.8s…%s: %v %v, want one hit of its own", name, name[250:], hits, err)
		}
	}
}

// A collection dropped under a Store that knows it (an operator dropped it, or the
// server lost its data and started afresh) is made again by the next Upsert, and
// searched and deleted from as an absent one, instead of failing every request
// until the Store is reopened.
func TestCollectionDroppedUnderTheStore(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	prefix := testPrefix(t, addr)
	s := newStore(t, milvus.Config{Addr: addr, Prefix: prefix, Consistency: milvus.Session})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	q := vectorstore.Query{Vector: []float32{1, 0}, K: 5}
	for _, name := range []string{"up", "search", "del"} {
		if err := s.Upsert(ctx, name, []vectorstore.Item{{ID: "old", Vector: []float32{1, 0}}}); err != nil {
			t.Fatalf("Upsert %s: %v", name, err)
		}
		if hits, err := s.Search(ctx, name, q); err != nil || len(hits) != 1 {
			t.Fatalf("Search %s: %v %v", name, hitIDs(hits), err)
		}
	}
	dropPrefix(t, addr, prefix)

	if hits, err := s.Search(ctx, "search", q); err != nil || len(hits) != 0 {
		t.Errorf("Search of the dropped collection: %v %v, want no hits and no error", hitIDs(hits), err)
	}
	if err := s.Delete(ctx, "del", []string{"old"}); err != nil {
		t.Errorf("Delete from the dropped collection: %v", err)
	}
	if err := s.Upsert(ctx, "up", []vectorstore.Item{{ID: "new", Vector: []float32{0, 1}}}); err != nil {
		t.Fatalf("Upsert into the dropped collection: %v", err)
	}
	if hits, err := s.Search(ctx, "up", q); err != nil || !slices.Equal(hitIDs(hits), []string{"new"}) {
		t.Errorf("Search after the Upsert made it again: %v %v, want [new]", hitIDs(hits), err)
	}
}

// Search is exact beyond Milvus's growing-segment chunks (128 rows) and its interim
// index: every hit of a larger collection is the brute-force one, under a filter too,
// and K up to Milvus's top-K limit works.
func TestExactSearchLargerCollection(t *testing.T) {
	t.Parallel()
	addr := serverAddr(t)
	s := newStore(t, milvus.Config{Addr: addr, Prefix: testPrefix(t, addr)})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rng := mathrand.New(mathrand.NewPCG(21, 22))
	const n, dim = 3000, 32
	items := make([]vectorstore.Item, n)
	for i := range items {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		items[i] = vectorstore.Item{ID: fmt.Sprintf("i%05d", i), Vector: v, Metadata: map[string]string{"m": fmt.Sprint(i % 7)}}
	}
	for i := 0; i < n; i += 1000 {
		if err := s.Upsert(ctx, "large", items[i:i+1000]); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 10 {
		q := items[rng.IntN(n)].Vector
		q = slices.Clone(q)
		for j := range q {
			q[j] += float32(rng.NormFloat64())
		}
		filter := map[string]string(nil)
		if round%2 == 1 {
			filter = map[string]string{"m": fmt.Sprint(round % 7)}
		}
		hits, err := s.Search(ctx, "large", vectorstore.Query{Vector: q, K: 20, Filter: filter})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		type scored struct {
			id string
			s  float64
		}
		var all []scored
		for _, it := range items {
			if filter == nil || it.Metadata["m"] == filter["m"] {
				all = append(all, scored{it.ID, cos64(it.Vector, q)})
			}
		}
		slices.SortFunc(all, func(a, b scored) int {
			if a.s != b.s {
				if a.s > b.s {
					return -1
				}
				return 1
			}
			return strings.Compare(a.id, b.id)
		})
		for _, x := range all[:20] {
			want = append(want, x.id)
		}
		if got := hitIDs(hits); !slices.Equal(got, want) {
			t.Errorf("round %d (filter %v):\n got  %v\n want %v", round, filter, got, want)
		}
	}
	hits, err := s.Search(ctx, "large", vectorstore.Query{Vector: items[0].Vector, K: 16384})
	if err != nil || len(hits) != n {
		t.Errorf("K=16384: %d hits, %v; want %d", len(hits), err, n)
	}
	if _, err := s.Search(ctx, "large", vectorstore.Query{Vector: items[0].Vector, K: 16385}); !errors.Is(err, vectorstore.ErrInvalid) {
		t.Errorf("K=16385: %v, want ErrInvalid (Milvus's top-K limit)", err)
	}
}

func cos64(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

func TestUnreachableServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := milvus.New(ctx, milvus.Config{Addr: "127.0.0.1:1", DialTimeout: time.Second})
	if err == nil {
		t.Fatal("New with nothing listening: no error")
	}
	if !errors.Is(err, milvus.ErrUnreachable) {
		t.Errorf("error %v is not ErrUnreachable: the node would report a fault of the service as one of its configuration", err)
	}
	// The user learns where it looked, and that nothing answered there.
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "no answer within 1s") {
		t.Errorf("New with nothing listening: %q; want the address and that nothing answered", msg)
	}
}

func hitIDs(hits []vectorstore.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

// BenchmarkSearch measures one search of K=10 among 2,000 vectors of dimension 384,
// at each consistency level: Strong waits for the server's next time tick.
func BenchmarkSearch(b *testing.B) {
	addr := os.Getenv(envAddr)
	if addr == "" {
		b.Skipf("%s is not set", envAddr)
	}
	for _, level := range []milvus.Consistency{milvus.Strong, milvus.Session, milvus.Bounded} {
		b.Run(string(level), func(b *testing.B) {
			ctx := b.Context()
			prefix := fmt.Sprintf("troupe_bench_%d_", time.Now().UnixNano())
			s, err := milvus.New(ctx, milvus.Config{Addr: addr, Prefix: prefix, Consistency: level})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			rng := mathrand.New(mathrand.NewPCG(1, 1))
			vec := func() []float32 {
				v := make([]float32, 384)
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
				return v
			}
			for i := 0; i < 2000; i += 500 {
				batch := make([]vectorstore.Item, 500)
				for j := range batch {
					batch[j] = vectorstore.Item{ID: fmt.Sprint(i + j), Vector: vec()}
				}
				if err := s.Upsert(ctx, "bench", batch); err != nil {
					b.Fatal(err)
				}
			}
			b.Cleanup(func() { dropPrefix(b, addr, prefix) })
			q := vec()
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Search(ctx, "bench", vectorstore.Query{Vector: q, K: 10}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
