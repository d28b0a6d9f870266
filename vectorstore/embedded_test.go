package vectorstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/vectorstore"
	"github.com/troupe-run/troupe/vectorstore/vectorstoretest"
)

func open(t *testing.T, cfg vectorstore.Config) *vectorstore.Embedded {
	t.Helper()
	s, err := vectorstore.Open(cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestEmbeddedMemoryConformance(t *testing.T) {
	vectorstoretest.Run(t, vectorstoretest.Features{}, func(t *testing.T) vectorstore.Store {
		return open(t, vectorstore.Config{})
	})
}

func TestEmbeddedFileConformance(t *testing.T) {
	paths := make(map[vectorstore.Store]string) // store -> its log, for Reopen
	vectorstoretest.Run(t, vectorstoretest.Features{
		Reopen: func(t *testing.T, s vectorstore.Store) vectorstore.Store {
			if err := s.(*vectorstore.Embedded).Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			path := paths[s]
			re := open(t, vectorstore.Config{Path: path})
			paths[re] = path
			return re
		},
	}, func(t *testing.T) vectorstore.Store {
		path := filepath.Join(t.TempDir(), "data", "vectors.log")
		s := open(t, vectorstore.Config{Path: path})
		paths[s] = path
		return s
	})
}

// Compaction on every write must not change what the suite sees.
func TestEmbeddedFileConformanceAlwaysCompacting(t *testing.T) {
	if testing.Short() {
		t.Skip("compacts on every write: slow")
	}
	paths := make(map[vectorstore.Store]string)
	cfg := func(path string) vectorstore.Config {
		return vectorstore.Config{Path: path, NoSync: true, CompactRatio: 1.01, CompactMinBytes: 1}
	}
	vectorstoretest.Run(t, vectorstoretest.Features{
		Reopen: func(t *testing.T, s vectorstore.Store) vectorstore.Store {
			if err := s.(*vectorstore.Embedded).Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			re := open(t, cfg(paths[s]))
			paths[re] = paths[s]
			return re
		},
	}, func(t *testing.T) vectorstore.Store {
		path := filepath.Join(t.TempDir(), "vectors.log")
		s := open(t, cfg(path))
		paths[s] = path
		return s
	})
}

func item(id string, v ...float32) vectorstore.Item {
	return vectorstore.Item{ID: id, Vector: v, Metadata: map[string]string{"id": id}, Text: "text " + id}
}

// ids lists the IDs of a collection of dimension 2, sorted.
func ids(t *testing.T, s vectorstore.Store, coll string) []string {
	t.Helper()
	hits, err := s.Search(t.Context(), coll, vectorstore.Query{Vector: []float32{1, 0}, K: 1000})
	if err != nil {
		t.Fatalf("Search: %v", err)
	}
	var out []string
	for _, h := range hits {
		out = append(out, h.ID)
	}
	slices.Sort(out)
	return out
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// writeBatches writes one record per batch and closes the store; it returns the log
// size after each record (sizes[0] is the empty log).
func writeBatches(t *testing.T, path string, batches ...[]vectorstore.Item) []int64 {
	t.Helper()
	s, err := vectorstore.Open(vectorstore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int64{fileSize(t, path)}
	for _, b := range batches {
		if err := s.Upsert(t.Context(), "c", b); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fileSize(t, path))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return sizes
}

func TestTornLastRecordIsDropped(t *testing.T) {
	b1 := []vectorstore.Item{item("a", 1, 0), item("b", 0, 1)}
	b2 := []vectorstore.Item{item("c", 1, 1)}
	for name, tear := range map[string]func(data []byte, sizes []int64) []byte{
		"payload cut":        func(d []byte, sz []int64) []byte { return d[:sz[1]+(sz[2]-sz[1])/2] },
		"header cut":         func(d []byte, sz []int64) []byte { return d[:sz[1]+5] },
		"only payload lost":  func(d []byte, sz []int64) []byte { return d[:sz[1]+12] },
		"last byte garbled":  func(d []byte, sz []int64) []byte { d[len(d)-1] ^= 0xff; return d },
		"zeroed tail":        func(d []byte, sz []int64) []byte { clear(d[sz[1]+3:]); return d },
		"header garbled":     func(d []byte, sz []int64) []byte { d[sz[1]+1] ^= 0x40; return d },
		"zeros appended":     func(d []byte, sz []int64) []byte { return append(d, make([]byte, 100)...) },
		"garbage appended":   func(d []byte, sz []int64) []byte { return append(d, "partial garbage"...) },
		"length beyond file": func(d []byte, sz []int64) []byte { return d[:len(d)-1] },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "v.log")
			sizes := writeBatches(t, path, b1, b2)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			data = tear(data, sizes)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			wantIDs, wantSize := []string{"a", "b"}, sizes[1]
			if strings.HasSuffix(name, "appended") {
				wantIDs, wantSize = []string{"a", "b", "c"}, sizes[2]
			}

			s, err := vectorstore.Open(vectorstore.Config{Path: path})
			if err != nil {
				t.Fatalf("Open after a torn write: %v", err)
			}
			if got := ids(t, s, "c"); !slices.Equal(got, wantIDs) {
				t.Errorf("after recovery: %v, want %v", got, wantIDs)
			}
			if got := fileSize(t, path); got != wantSize {
				t.Errorf("log is %d bytes after recovery, want %d (truncated to the last valid record)", got, wantSize)
			}
			// New writes land after the last valid record and survive a reopen.
			if err := s.Upsert(t.Context(), "c", []vectorstore.Item{item("d", 2, 1)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, vectorstore.Config{Path: path})
			if got, want := ids(t, s, "c"), append(wantIDs, "d"); !slices.Equal(got, want) {
				t.Errorf("after writing and reopening: %v, want %v", got, want)
			}
		})
	}
}

func TestCorruptRecordInTheMiddleIsAnError(t *testing.T) {
	b1 := []vectorstore.Item{item("a", 1, 0), item("b", 0, 1)}
	b2 := []vectorstore.Item{item("c", 1, 1)}
	for name, offset := range map[string]func(sizes []int64) int64{
		"payload byte": func(sz []int64) int64 { return sz[0] + 12 + 10 },
		"length field": func(sz []int64) int64 { return sz[0] + 1 },
		"payload CRC":  func(sz []int64) int64 { return sz[0] + 9 },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "v.log")
			sizes := writeBatches(t, path, b1, b2)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			data[offset(sizes)] ^= 0x10
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = vectorstore.Open(vectorstore.Config{Path: path})
			if !errors.Is(err, vectorstore.ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("offset %d", sizes[0])) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q should name the file and the record offset %d", err, sizes[0])
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, data) {
				t.Error("Open changed a corrupt log; it must leave it for inspection")
			}
		})
	}
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	for name, content := range map[string]string{
		"text":          "hello, this is not a log\n",
		"short garbage": "abc",
		"newer version": "TRVSLOG\x02",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "v.log")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := vectorstore.Open(vectorstore.Config{Path: path}); !errors.Is(err, vectorstore.ErrCorrupt) {
				t.Errorf("Open: %v, want ErrCorrupt", err)
			}
		})
	}
	// An empty file, or one torn while its magic was written, starts afresh.
	for _, content := range []string{"", "TRV"} {
		path := filepath.Join(t.TempDir(), "v.log")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		s := open(t, vectorstore.Config{Path: path})
		if err := s.Upsert(t.Context(), "c", []vectorstore.Item{item("a", 1, 0)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenLocksTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.log")
	s, err := vectorstore.Open(vectorstore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vectorstore.Open(vectorstore.Config{Path: path}); !errors.Is(err, vectorstore.ErrLocked) {
		t.Errorf("second Open: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, vectorstore.Config{Path: path}) // the lock went with Close
}

func TestCompactionBoundsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.log")
	s := open(t, vectorstore.Config{Path: path, NoSync: true, CompactRatio: 2, CompactMinBytes: 4096})
	for i := range 500 {
		if err := s.Upsert(t.Context(), "c", []vectorstore.Item{item("same", float32(i+1), 1), item(fmt.Sprint("k", i%3), 1, float32(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if size := fileSize(t, path); size > 8192 {
		t.Errorf("log is %d bytes for 4 live items; compaction should keep it near 4096", size)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, vectorstore.Config{Path: path})
	if got, want := ids(t, s, "c"), []string{"k0", "k1", "k2", "same"}; !slices.Equal(got, want) {
		t.Fatalf("after compaction and reopen: %v, want %v", got, want)
	}
	hits, err := s.Search(t.Context(), "c", vectorstore.Query{Vector: []float32{500, 1}, K: 1, Filter: map[string]string{"id": "same"}})
	if err != nil || len(hits) != 1 || hits[0].Vector[0] != 500 {
		t.Errorf("latest version of the item lost: %+v, %v", hits, err)
	}
}

func TestCompactionOnOpenAndExplicit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.log")
	never := vectorstore.Config{Path: path, NoSync: true, CompactRatio: 1e12}
	s, err := vectorstore.Open(never)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := s.Upsert(t.Context(), "c", []vectorstore.Item{item("x", float32(i+1), 2)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(t.Context(), "c", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Upsert(t.Context(), "c", []vectorstore.Item{item("y", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	grown := fileSize(t, path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, vectorstore.Config{Path: path, CompactMinBytes: 1})
	compacted := fileSize(t, path)
	if compacted >= grown/10 {
		t.Errorf("Open did not compact: %d bytes before, %d after", grown, compacted)
	}
	if got := ids(t, s, "c"); !slices.Equal(got, []string{"y"}) {
		t.Errorf("after compaction on open: %v, want [y]", got)
	}
	if err := s.Delete(t.Context(), "c", []string{"y"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, vectorstore.Config{Path: path})
	// The emptied collection survived compaction with its dimension.
	if got := ids(t, s, "c"); len(got) != 0 {
		t.Errorf("after explicit compaction: %v, want none", got)
	}
	if err := s.Upsert(t.Context(), "c", []vectorstore.Item{item("z", 1, 2, 3)}); !errors.Is(err, vectorstore.ErrDimension) {
		t.Errorf("emptied collection lost its dimension in compaction: %v", err)
	}
}

func TestCompactionSplitsLargeCollections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.log")
	s, err := vectorstore.Open(vectorstore.Config{Path: path, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	const n, dim = 3000, 384 // about 4.6 MB: more than one compaction record
	for i := 0; i < n; i += 500 {
		batch := make([]vectorstore.Item, 500)
		for j := range batch {
			v := make([]float32, dim)
			for k := range v {
				v[k] = float32(rng.NormFloat64())
			}
			batch[j] = vectorstore.Item{ID: fmt.Sprint(i + j), Vector: v}
		}
		if err := s.Upsert(t.Context(), "big", batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Compact(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, vectorstore.Config{Path: path})
	q := make([]float32, dim)
	q[0] = 1
	hits, err := s.Search(t.Context(), "big", vectorstore.Query{Vector: q, K: n + 1})
	if err != nil || len(hits) != n {
		t.Fatalf("after compaction: %d hits, %v; want %d", len(hits), err, n)
	}
}

func TestStaleCompactionFileIsRemoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "v.log")
	writeBatches(t, path, []vectorstore.Item{item("a", 1, 0)})
	if err := os.WriteFile(path+".compact", []byte("half a compaction"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := open(t, vectorstore.Config{Path: path})
	if got := ids(t, s, "c"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("got %v, want [a]", got)
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale compaction file still there: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []vectorstore.Config{{CompactRatio: 1}, {CompactRatio: 0.5}, {CompactRatio: -1}, {CompactMinBytes: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted a bad config", c)
		}
		if _, err := vectorstore.Open(c); err == nil {
			t.Errorf("Open(%+v) accepted a bad config", c)
		}
	}
	if err := (vectorstore.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

func TestSearchStopsWhenCancelledMidScan(t *testing.T) {
	s := open(t, vectorstore.Config{})
	batch := make([]vectorstore.Item, 20000)
	for i := range batch {
		batch[i] = vectorstore.Item{ID: fmt.Sprint(i), Vector: []float32{1, float32(i)}}
	}
	if err := s.Upsert(t.Context(), "c", batch); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Search(ctx, "c", vectorstore.Query{Vector: []float32{1, 0}, K: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Search: %v, want context.Canceled", err)
	}
}

func ExampleEmbedded() {
	ctx := context.Background()
	s, err := vectorstore.Open(vectorstore.Config{}) // Path "" keeps it in memory
	if err != nil {
		panic(err)
	}
	defer s.Close()

	_ = s.Upsert(ctx, "notes", []vectorstore.Item{
		{ID: "cat", Vector: []float32{0.9, 0.1, 0}, Metadata: map[string]string{"kind": "animal"}, Text: "cats purr"},
		{ID: "dog", Vector: []float32{0.8, 0.3, 0}, Metadata: map[string]string{"kind": "animal"}, Text: "dogs bark"},
		{ID: "car", Vector: []float32{0.7, 0, 0.7}, Metadata: map[string]string{"kind": "vehicle"}, Text: "cars honk"},
	})
	hits, _ := s.Search(ctx, "notes", vectorstore.Query{
		Vector: []float32{1, 0, 0},
		K:      2,
		Filter: map[string]string{"kind": "animal"},
	})
	for _, h := range hits {
		fmt.Printf("%s %.3f %s\n", h.ID, h.Score, h.Text)
	}
	// Output:
	// cat 0.994 cats purr
	// dog 0.936 dogs bark
}
