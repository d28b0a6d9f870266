package node

import (
	"slices"
	"sync"
)

// boundedSet is a set of at most max keys: adding one past that forgets the
// oldest added. It is safe for concurrent use. The poison publisher's records
// sent (poisonPublisher.sent) and the turns the write after task remembered
// (afterTaskWriter.handled) are ones.
type boundedSet struct {
	mu    sync.Mutex
	max   int
	keys  map[string]struct{}
	order []string // oldest first
}

func newBoundedSet(max int) *boundedSet {
	return &boundedSet{max: max, keys: map[string]struct{}{}}
}

func (s *boundedSet) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[key]
	return ok
}

// add adds key (a key held already stays where it was in the order) and, past
// max keys, forgets the oldest.
func (s *boundedSet) add(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[key]; ok {
		return
	}
	s.keys[key] = struct{}{}
	s.order = append(s.order, key)
	if len(s.order) > s.max {
		delete(s.keys, s.order[0])
		s.order = slices.Delete(s.order, 0, 1)
	}
}
