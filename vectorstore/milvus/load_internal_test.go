package milvus

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/troupe-run/troupe/vectorstore"
)

// loadingServer is a client of a server that holds collection phys (dimension 3,
// indexed) not loaded, and loads it only when told (finish): a Milvus killed and
// started again, which loads a large collection for minutes. A synchronous load
// waits, as the SDK's does, until the collection is loaded or the request ends.
type loadingServer struct {
	client.Client // the methods the Store does not call: nil
	phys          string

	mu       sync.Mutex
	dropped  bool // the collection was dropped (by another client)
	asked    bool // a load was asked for
	loaded   bool
	loadDone chan struct{}
	upserted int
}

func (f *loadingServer) HasCollection(_ context.Context, name string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return name == f.phys && !f.dropped, nil
}

func (f *loadingServer) DescribeCollection(_ context.Context, name string) (*entity.Collection, error) {
	return &entity.Collection{Name: name, Schema: &entity.Schema{Description: "c", Fields: []*entity.Field{
		{Name: fieldVector, DataType: entity.FieldTypeFloatVector, TypeParams: map[string]string{entity.TypeParamDim: strconv.Itoa(3)}},
	}}}, nil
}

func (f *loadingServer) DescribeIndex(context.Context, string, string, ...client.IndexOption) ([]entity.Index, error) {
	idx, err := entity.NewIndexFlat(entity.COSINE)
	return []entity.Index{idx}, err
}

func (f *loadingServer) GetLoadState(context.Context, string, []string) (entity.LoadState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.dropped:
		return entity.LoadStateNotExist, nil // what Milvus 2.3.5 answers, with no error
	case f.loaded:
		return entity.LoadStateLoaded, nil
	case f.asked:
		return entity.LoadStateLoading, nil
	}
	return entity.LoadStateNotLoad, nil
}

func (f *loadingServer) LoadCollection(ctx context.Context, _ string, async bool, _ ...client.LoadCollectionOption) error {
	f.mu.Lock()
	f.asked = true
	f.mu.Unlock()
	if async {
		return nil
	}
	select {
	case <-f.loadDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *loadingServer) finish() {
	f.mu.Lock()
	f.loaded = true
	f.mu.Unlock()
	close(f.loadDone)
}

func (f *loadingServer) Upsert(_ context.Context, _, _ string, cols ...entity.Column) (entity.Column, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upserted += cols[0].Len()
	return cols[0], nil
}

func (f *loadingServer) Search(context.Context, string, []string, string, []string, []entity.Vector, string, entity.MetricType, int, entity.SearchParam, ...client.SearchQueryOptionFunc) ([]client.SearchResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.loaded {
		return nil, errors.New("collection not loaded[collection=1]")
	}
	return []client.SearchResult{{}}, nil // nothing matched
}

// storeOnALoadingServer makes a Store (Strong, prefix p_, a request timeout of an
// hour) on a loadingServer whose collection p_c loads until the test finishes
// it, and returns them with a context of a minute for the test's requests.
func storeOnALoadingServer(t *testing.T) (*loadingServer, *Store, context.Context) {
	t.Helper()
	srv := &loadingServer{phys: "p_c", loadDone: make(chan struct{})}
	s := &Store{cfg: Config{Addr: "fake:19530", Prefix: "p_", RequestTimeout: time.Hour}.WithDefaults(), client: srv,
		level: levels[Strong], colls: map[string]*collection{}, socks: map[*socket]struct{}{}, loading: map[string]time.Time{}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return srv, s, ctx
}

// A collection that the server loads for a long time (a Milvus started again after
// a kill -9, loading its data) takes writes at once and fails searches saying that it
// loads, instead of holding every request for its load: each upsert waited for the
// SDK's synchronous load up to the request timeout (30 s), so a write to memory took
// 30 s and more, and a hybrid search two minutes, until Milvus had loaded.
func TestACollectionStillLoadingTakesWritesAndFailsSearchesAtOnce(t *testing.T) {
	t.Parallel()
	srv, s, ctx := storeOnALoadingServer(t)

	if err := s.Upsert(ctx, "c", []vectorstore.Item{{ID: "a", Vector: []float32{1, 0, 0}}}); err != nil {
		t.Fatalf("Upsert while the collection loads: %v", err)
	}
	if srv.upserted != 1 {
		t.Errorf("the server took %d items, want 1", srv.upserted)
	}
	_, err := s.Search(ctx, "c", vectorstore.Query{Vector: []float32{1, 0, 0}, K: 1})
	if ctx.Err() != nil || !errors.Is(err, errLoading) {
		t.Fatalf("Search while the collection loads: %v (the test's context: %v), want one that says it loads", err, ctx.Err())
	}
	if refusal(err) {
		t.Errorf("the search's error is a refusal, want a passing state: %v", err)
	}

	srv.finish()
	if hits, err := s.Search(ctx, "c", vectorstore.Query{Vector: []float32{1, 0, 0}, K: 1}); err != nil || len(hits) != 0 {
		t.Errorf("Search once loaded: %v %v, want no hits and no error", hits, err)
	}
}

// A collection dropped (by another client) while the Store waited for its load:
// Milvus answers its load state "does not exist" with no error. Before, the Store
// took that for "not loaded yet", waited out its load budget, and then failed every
// search of it as loading, until a write made it again; now it forgets the
// collection, as after a search that finds it gone, and the search finds nothing.
func TestACollectionDroppedWhileItLoadsIsForgotten(t *testing.T) {
	t.Parallel()
	srv, s, ctx := storeOnALoadingServer(t)
	if err := s.Upsert(ctx, "c", []vectorstore.Item{{ID: "a", Vector: []float32{1, 0, 0}}}); err != nil {
		t.Fatalf("Upsert while the collection loads: %v", err)
	}
	srv.mu.Lock()
	srv.dropped = true
	srv.mu.Unlock()
	for i := range 2 {
		if hits, err := s.Search(ctx, "c", vectorstore.Query{Vector: []float32{1, 0, 0}, K: 1}); err != nil || len(hits) != 0 {
			t.Fatalf("Search %d of the dropped collection: %v %v, want no hits and no error", i+1, hits, err)
		}
	}
	s.cmu.Lock()
	_, loading := s.loading["c"]
	s.cmu.Unlock()
	if loading {
		t.Error("the Store still times the load of the dropped collection")
	}
}
