package node

import (
	"sync"
	"time"
)

// servedEffects counts the effects a node performs for other nodes' sessions
// (handleEffect) from the moment it takes their requests on until it published
// their replies, so that Close lets them answer before it stops their handlers:
// stopping a handler gives its partitions up, and a request whose reply was not
// published yet would be performed again by the next node to read it.
type servedEffects struct {
	mu      sync.Mutex
	out     int
	closing bool
	idle    chan struct{} // closed once closing with none out
}

// start counts one more effect served; false once close began: the request is
// not taken on.
func (s *servedEffects) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.out++
	return true
}

// done counts one effect served less.
func (s *servedEffects) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out--
	if s.closing && s.out == 0 {
		close(s.idle)
	}
}

// close takes no more effects on and waits up to within for those out to be done.
// It reports how many were still out then. It is called once.
func (s *servedEffects) close(within time.Duration) int {
	s.mu.Lock()
	s.closing = true
	s.idle = make(chan struct{})
	if s.out == 0 {
		close(s.idle)
	}
	idle := s.idle
	s.mu.Unlock()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-idle:
		return 0
	case <-t.C:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.out
	}
}
