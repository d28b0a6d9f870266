package memory

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The defaults of the passivation of namespaces (Config.IdleTimeout,
// Config.MaxNamespaces).
const (
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultMaxNamespaces = 1000
	// DefaultVectorRetry is the default of Config.VectorRetry.
	DefaultVectorRetry = 2 * time.Minute
)

// sweepEvery bounds how often the operations of a namespace look for namespaces to
// release while the loaded ones stay within MaxNamespaces.
const sweepEvery = 10 * time.Second

// maxSynced bounds the marks of released namespaces whose vectors were in the store
// (loaded.synced): past it, a namespace is released without one, and rebuilds its
// vectors when it is loaded again.
const maxSynced = 100_000

// loaded holds the namespaces this process has folded and keeps in memory, as a
// node holds its session actors: a namespace is loaded (folded from its events) on
// its first use, and released (passivated) once unused for IdleTimeout, or earlier,
// least recently used first, when more than MaxNamespaces are loaded. Its next use
// folds it again from its events: nothing is lost, since the events hold it all. A
// namespace is not released while an operation runs on it, while it is held
// (Memories.Hold: a consolidation run), or while the vector store still lacks some
// of its vectors: the bound is soft. Nor is the namespace an open returns released
// by the sweep of that open, even when it is the only one that could be.
//
// Past the bound, each open releases the least recently used of the namespaces it
// may release, without going through all of them: one found unreleasable is set
// aside (blocked) and not looked at again by the opens that follow until it is
// used again or the next full sweep (every sweepEvery, or ReleaseIdle), so that
// opens stay cheap however many loaded namespaces cannot be released.
type loaded struct {
	mu    sync.Mutex
	m     map[string]*slot
	swept time.Time
	uses  uint64 // counts the opens: the order of the last uses
	// lru holds the loaded namespaces a sweep past the bound may try to
	// release, least recently used at its back; blocked those such a sweep
	// found it could not release since the last full sweep.
	lru, blocked slotList
	// examined counts the namespaces sweeps tried to release (a test reads it).
	examined int64
	// synced holds, by namespace, the seq up to which a released namespace's
	// vectors were all in the store: loaded again, it trusts the store with them
	// instead of writing them all again.
	synced map[string]uint64
	// written holds the namespaces that an instance released while its caller
	// held it wrote to since: the instance loaded now folds that before its next
	// use, so that this process reads its own writes.
	written map[string]bool
}

type slot struct {
	name   string
	ns     *Namespace
	mu     sync.Mutex
	opened bool
	gone   bool // released: the next use makes a new slot
	// prev, next and list place it in loaded.lru or loaded.blocked (l.mu).
	prev, next *slot
	list       *slotList
}

// slotList is a doubly linked list of slots, most recently put at its front.
type slotList struct{ front, back *slot }

func (q *slotList) pushFront(s *slot) {
	s.list, s.prev, s.next = q, nil, q.front
	if q.front != nil {
		q.front.prev = s
	} else {
		q.back = s
	}
	q.front = s
}

// remove takes s out of the list it is in, if any.
func (s *slot) remove() {
	q := s.list
	if q == nil {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		q.front = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		q.back = s.prev
	}
	s.list, s.prev, s.next = nil, nil, nil
}

// open returns the namespace name, loaded (open succeeded on it) and marked used
// now; stale when an instance released earlier wrote to it since it was loaded:
// the caller refreshes it.
func (l *loaded) open(name string, now time.Time, make func() *Namespace, open func(*Namespace) error) (ns *Namespace, stale bool, err error) {
	for {
		l.mu.Lock()
		if l.m == nil {
			l.m, l.synced, l.written = map[string]*slot{}, map[string]uint64{}, map[string]bool{}
		}
		stale = l.written[name]
		delete(l.written, name)
		s, ok := l.m[name]
		if !ok {
			ns := make()
			if seq, ok := l.synced[name]; ok {
				ns.resumeAt = seq
				delete(l.synced, name)
			}
			s = &slot{name: name, ns: ns}
			l.m[name] = s
		}
		l.uses++
		s.ns.used.Store(now.UnixNano())
		s.ns.order.Store(l.uses)
		s.remove()
		l.lru.pushFront(s)
		l.mu.Unlock()
		s.mu.Lock()
		if s.gone {
			s.mu.Unlock()
			continue
		}
		if !s.opened {
			if err := open(s.ns); err != nil {
				s.mu.Unlock()
				return nil, false, err
			}
			s.opened = true
		}
		s.mu.Unlock()
		return s.ns, stale, nil
	}
}

// changed records that a released instance of namespace name wrote to it.
func (l *loaded) changed(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		l.written[name] = true
	}
}

// each calls fn on each loaded namespace, in no order, and returns the first error
// (after calling it on every one).
func (l *loaded) each(fn func(*Namespace) error) error {
	l.mu.Lock()
	slots := make([]*slot, 0, len(l.m))
	for _, s := range l.m {
		slots = append(slots, s)
	}
	l.mu.Unlock()
	var first error
	for _, s := range slots {
		s.mu.Lock()
		ok := s.opened && !s.gone
		s.mu.Unlock()
		if !ok {
			continue
		}
		if err := fn(s.ns); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// count is the number of namespaces loaded.
func (l *loaded) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// sweep releases the namespaces unused since now − idle (idle ≤ 0: none), then the
// least recently used ones while more than max are loaded (max ≤ 0: no bound),
// never namespace keep (the one the open that sweeps returns; "": none). A full
// sweep, which looks at every namespace, runs when force or when the last one ran
// sweepEvery ago or more; else, while more than max are loaded, a sweep releases
// the least recently used of those not found unreleasable since (see loaded). It
// returns how many it released.
func (l *loaded) sweep(now time.Time, idle time.Duration, max int, force bool, keep string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	over := func() bool { return max > 0 && len(l.m) > max }
	if force || now.Sub(l.swept) >= sweepEvery {
		l.swept = now
		return l.sweepAll(now, idle, max, keep)
	}
	released := 0
	for s := l.lru.back; s != nil && over(); {
		prev := s.prev
		switch {
		case s.name == keep:
		case l.release(s):
			released++
		default:
			s.remove()
			l.blocked.pushFront(s)
		}
		s = prev
	}
	return released
}

// sweepAll is a full sweep: it looks at every loaded namespace, least recently
// used first, and makes every one left a candidate of the sweeps that follow
// again. The caller holds l.mu.
func (l *loaded) sweepAll(now time.Time, idle time.Duration, max int, keep string) int {
	slots := make([]*slot, 0, len(l.m))
	for _, s := range l.m {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, func(a, b *slot) int { return cmp.Compare(a.ns.order.Load(), b.ns.order.Load()) })
	l.lru, l.blocked = slotList{}, slotList{}
	released := 0
	for _, s := range slots {
		s.list, s.prev, s.next = nil, nil, nil
		idleOut := idle > 0 && now.UnixNano()-s.ns.used.Load() >= int64(idle)
		if s.name != keep && (idleOut || (max > 0 && len(l.m) > max)) && l.release(s) {
			released++
			continue
		}
		l.lru.pushFront(s)
	}
	return released
}

// release takes slot s's namespace out of the loaded ones, unless it is in use.
// The caller holds l.mu.
func (l *loaded) release(s *slot) bool {
	l.examined++
	if !s.mu.TryLock() { // being loaded
		return false
	}
	defer s.mu.Unlock()
	ns := s.ns
	if !s.opened || ns.holds.Load() > 0 || !ns.mu.TryLock() {
		return false
	}
	defer ns.mu.Unlock()
	p := ns.pj
	if len(p.dirty) > 0 || len(p.stale) > 0 || p.backlog > 0 {
		return false // what the vector store still lacks would wait for the next use
	}
	if len(p.parked) == 0 && ns.st.seq > 0 && len(l.synced) < maxSynced {
		l.synced[s.name] = ns.st.seq
	}
	// Its parked vectors are tried again when it is loaded again.
	ns.m.parkedN.Add(-p.parkedN)
	p.parkedN = 0
	s.gone = true
	ns.released.Store(true)
	s.remove()
	delete(l.m, s.name)
	return true
}

// LoadedNamespaces is the number of namespaces this process holds in memory,
// folded (see Config.IdleTimeout and Config.MaxNamespaces).
func (m *Memories) LoadedNamespaces() int { return m.spaces.count() }

// ReleaseIdle releases the namespaces unused for IdleTimeout, and the least
// recently used ones past MaxNamespaces (see Config.IdleTimeout), now: a node does
// it in its background catch-up (CatchUpVectors), and the opening of a namespace
// does it too. It returns how many it released.
func (m *Memories) ReleaseIdle() int {
	return m.spaces.sweep(m.cfg.Now(), m.cfg.IdleTimeout, m.cfg.MaxNamespaces, true, "")
}

// Hold returns the namespace name, as Namespace does, held in memory until release
// is called: a long operation that calls the namespace several times (a
// consolidation run) is not cut by its release in the middle. release is
// idempotent.
func (m *Memories) Hold(ctx context.Context, name string) (ns *Namespace, release func(), err error) {
	ns, err = m.Namespace(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	ns.holds.Add(1)
	var once sync.Once
	return ns, func() {
		once.Do(func() {
			ns.used.Store(m.cfg.Now().UnixNano())
			ns.holds.Add(-1)
		})
	}, nil
}

// namespaceUse is what a Namespace keeps of its passivation.
type namespaceUse struct {
	used  atomic.Int64  // when it was last opened (Memories.Namespace), in Unix ns of Config.Now
	order atomic.Uint64 // the order of that use among the others' (loaded.uses)
	// parkDue is when the first of its parked vectors may be tried again, in
	// Unix ns of the wall clock (0: none parked)
	parkDue atomic.Int64
	holds   atomic.Int32 // Memories.Hold calls not released
	// released: no longer the instance Memories serves for its name (a caller
	// that held it goes on with it, and its writes are told to the new one)
	released atomic.Bool
	// resumeAt is the seq up to which the vector store held every vector of the
	// namespace when it was last released in this process (0: unknown): the fold
	// trusts the store with them once it passes that seq.
	resumeAt uint64
}
