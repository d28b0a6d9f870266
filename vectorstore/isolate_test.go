package vectorstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/troupe-run/troupe/vectorstore"
)

// downStore fails every Upsert with an error that is no refusal, as a store that
// does not answer does, and counts the calls.
type downStore struct {
	vectorstore.Store
	calls int
}

var errDown = errors.New("connection refused (test)")

func (s *downStore) Upsert(context.Context, string, []vectorstore.Item) error {
	s.calls++
	return errDown
}

// A batch that fails for another reason than its items is not split: the whole
// batch fails with the error, nothing is parked, and the batches after it are not
// tried.
func TestUpsertIsolatingTransientErrorFailsTheBatch(t *testing.T) {
	st := &downStore{Store: open(t, vectorstore.Config{})}
	items := []vectorstore.Item{{ID: "a", Vector: []float32{1, 0}}, {ID: "b", Vector: []float32{0, 1}}, {ID: "c", Vector: []float32{1, 1}}}
	parked, err := vectorstore.UpsertIsolating(t.Context(), st, "down", items, 2)
	if !errors.Is(err, errDown) || len(parked) != 0 || st.calls != 1 {
		t.Errorf("UpsertIsolating on a store that is down: parked %v, err %v, %d calls; want errDown, nothing parked, 1 call", parked, err, st.calls)
	}
}
