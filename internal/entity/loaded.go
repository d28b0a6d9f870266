package entity

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// SweepEvery bounds how often the opens of a Loaded registry look at every entity
// it holds (a full sweep): for the idle ones, and for those a sweep past the bound
// found it could not release.
const SweepEvery = 10 * time.Second

// maxSynced bounds the marks of released entities whose outside projections were
// in line with their fold (Loaded.synced): past it, an entity is released without
// one, and rebuilds its projections when it is loaded again.
const maxSynced = 100_000

// Use is what a Loaded registry keeps of an entity's use: each entity it holds
// has one, which the registry reaches with the use function it was made with.
type Use struct {
	used  atomic.Int64  // when it was last opened, in Unix ns of the registry's clock
	order atomic.Uint64 // the order of that use among the others' (Loaded.uses)
	holds atomic.Int32  // Loaded.Hold calls not released
	// released: no longer the instance the registry serves for its name (a
	// caller that held it goes on with it, and tells its writes with
	// Loaded.Changed).
	released atomic.Bool
	// resumeAt is the seq up to which the outside projections held all of the
	// entity when it was last released in this process (0: unknown).
	resumeAt uint64
}

// Released reports whether the registry released this instance: it serves
// another for its name since. A write through it must call Loaded.Changed.
func (u *Use) Released() bool { return u.released.Load() }

// ResumeAt is the seq up to which the outside projections (a vector store) held
// every item of the entity when this process last released it (0: unknown): once
// its fold passes that seq, the entity may trust them with what it folded, instead
// of writing it all again. It is set before the registry's open function runs.
func (u *Use) ResumeAt() uint64 { return u.resumeAt }

// Loaded holds the entities of one kind (memory namespaces, knowledge bases) this
// process has folded and keeps in memory, as a node holds its session actors: an
// entity is loaded (made, then folded from its events by the open function) on its
// first use, and released (passivated) once unused for an idle time, or earlier,
// least recently used first, when more than a maximum are loaded. Its next use
// folds it again from its events: nothing is lost, since the events hold it all.
// An entity is not released while it is held (Hold), while it is being opened, or
// when the release function refuses (an operation runs on it, or its outside
// projections still lack some of it): the bound is soft. Nor is the entity an open
// returns released by the sweep of that open, even when it is the only one that
// could be.
//
// Past the bound, each sweep releases the least recently used of the entities it
// may release, without going through all of them: one found unreleasable is set
// aside (blocked) and not looked at again by the sweeps that follow until it is
// used again or the next full sweep (every SweepEvery, or a forced one), so that
// opens stay cheap however many loaded entities cannot be released.
//
// It is safe for concurrent use.
type Loaded[T any] struct {
	use     func(T) *Use
	release func(v T, let func(synced uint64)) bool

	mu    sync.Mutex
	m     map[string]*slot[T]
	swept time.Time
	uses  uint64 // counts the opens: the order of the last uses
	// lru holds the loaded entities a sweep past the bound may try to release,
	// least recently used at its back; blocked those such a sweep found it could
	// not release since the last full sweep.
	lru, blocked slotList[T]
	examined     int64 // the release attempts (Examined)
	// synced holds, by name, the seq up to which a released entity's outside
	// projections held all of it: loaded again, it trusts them (Use.ResumeAt).
	synced map[string]uint64
	// written holds the names of the entities that an instance released while its
	// caller held it wrote to since: the instance loaded now folds that before
	// its next use (Open's stale), so that this process reads its own writes.
	written map[string]bool
}

// NewLoaded returns an empty registry of entities whose Use is use(v). release(v,
// let) is asked by the sweeps whether v may go: it must not block (an entity whose
// lock is taken is in use: it returns false); when v may go, it calls let, with its
// lock still held so that an operation that starts after it sees Use.Released,
// passing the seq up to which v's outside projections hold all of it (0: not all,
// or unknown), and returns true. It is called with the registry's lock held.
func NewLoaded[T any](use func(T) *Use, release func(v T, let func(synced uint64)) bool) *Loaded[T] {
	return &Loaded[T]{use: use, release: release, m: map[string]*slot[T]{}, synced: map[string]uint64{}, written: map[string]bool{}}
}

type slot[T any] struct {
	name   string
	v      T
	mu     sync.Mutex
	opened bool
	gone   bool // released: the next use makes a new slot
	// prev, next and list place it in Loaded.lru or Loaded.blocked (Loaded.mu).
	prev, next *slot[T]
	list       *slotList[T]
}

// slotList is a doubly linked list of slots, most recently put at its front.
type slotList[T any] struct{ front, back *slot[T] }

func (q *slotList[T]) pushFront(s *slot[T]) {
	s.list, s.prev, s.next = q, nil, q.front
	if q.front != nil {
		q.front.prev = s
	} else {
		q.back = s
	}
	q.front = s
}

// remove takes s out of the list it is in, if any.
func (s *slot[T]) remove() {
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

// Open returns the entity named name, made by make when none is loaded, once open
// succeeded on it, and marks it used now. Calls for one name wait for each other's
// open; a failed open returns its error and is tried again by the next call. stale
// says an instance released earlier wrote to it since it was loaded (Changed): the
// caller folds it again.
func (l *Loaded[T]) Open(name string, now time.Time, make func() T, open func(T) error) (v T, stale bool, err error) {
	for {
		l.mu.Lock()
		stale = l.written[name]
		delete(l.written, name)
		s, ok := l.m[name]
		if !ok {
			s = &slot[T]{name: name, v: make()}
			if seq, ok := l.synced[name]; ok {
				l.use(s.v).resumeAt = seq
				delete(l.synced, name)
			}
			l.m[name] = s
		}
		l.uses++
		u := l.use(s.v)
		u.used.Store(now.UnixNano())
		u.order.Store(l.uses)
		s.remove()
		l.lru.pushFront(s)
		l.mu.Unlock()
		s.mu.Lock()
		if s.gone {
			s.mu.Unlock()
			continue
		}
		if !s.opened {
			if err := open(s.v); err != nil {
				s.mu.Unlock()
				var zero T
				return zero, false, err
			}
			s.opened = true
		}
		s.mu.Unlock()
		return s.v, stale, nil
	}
}

// Hold keeps v loaded until release is called (a long operation that calls it
// several times is not cut by its release in the middle); release marks it used
// at now() and is idempotent.
func (l *Loaded[T]) Hold(v T, now func() time.Time) (release func()) {
	u := l.use(v)
	u.holds.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			u.used.Store(now().UnixNano())
			u.holds.Add(-1)
		})
	}
}

// Changed records that a released instance of entity name wrote to it: the next
// Open of name says stale.
func (l *Loaded[T]) Changed(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written[name] = true
}

// Each calls fn on each loaded entity open succeeded on, in no order, and returns
// the first error (after calling it on every one).
func (l *Loaded[T]) Each(fn func(T) error) error {
	l.mu.Lock()
	slots := make([]*slot[T], 0, len(l.m))
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
		if err := fn(s.v); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Has reports whether entity name is loaded: open succeeded on it, and it is not
// released. The answer may be out of date as soon as it is given (a sweep may
// release it): a hint, for a caller that would otherwise read the log.
func (l *Loaded[T]) Has(name string) bool {
	l.mu.Lock()
	s, ok := l.m[name]
	l.mu.Unlock()
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened && !s.gone
}

// Count is the number of entities loaded.
func (l *Loaded[T]) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// Examined counts the entities the sweeps tried to release: their work.
func (l *Loaded[T]) Examined() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.examined
}

// Sweep releases the entities unused since now − idle (idle ≤ 0: none), then the
// least recently used ones while more than max are loaded (max ≤ 0: no bound),
// never entity keep (the one the open that sweeps returns; "": none). A full
// sweep, which looks at every entity, runs when force or when the last one ran
// SweepEvery ago or more; else, while more than max are loaded, a sweep releases
// the least recently used of those not found unreleasable since (see Loaded). It
// returns how many it released.
func (l *Loaded[T]) Sweep(now time.Time, idle time.Duration, max int, force bool, keep string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if force || now.Sub(l.swept) >= SweepEvery {
		l.swept = now
		return l.sweepAll(now, idle, max, keep)
	}
	released := 0
	for s := l.lru.back; s != nil && max > 0 && len(l.m) > max; {
		prev := s.prev
		switch {
		case s.name == keep:
		case l.tryRelease(s):
			released++
		default:
			s.remove()
			l.blocked.pushFront(s)
		}
		s = prev
	}
	return released
}

// sweepAll is a full sweep: it looks at every loaded entity, least recently used
// first, and makes every one left a candidate of the sweeps that follow again. The
// caller holds l.mu.
func (l *Loaded[T]) sweepAll(now time.Time, idle time.Duration, max int, keep string) int {
	slots := make([]*slot[T], 0, len(l.m))
	for _, s := range l.m {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, func(a, b *slot[T]) int { return cmp.Compare(l.use(a.v).order.Load(), l.use(b.v).order.Load()) })
	l.lru, l.blocked = slotList[T]{}, slotList[T]{}
	released := 0
	for _, s := range slots {
		s.list, s.prev, s.next = nil, nil, nil
		idleOut := idle > 0 && now.UnixNano()-l.use(s.v).used.Load() >= int64(idle)
		if s.name != keep && (idleOut || (max > 0 && len(l.m) > max)) && l.tryRelease(s) {
			released++
			continue
		}
		l.lru.pushFront(s)
	}
	return released
}

// tryRelease takes slot s's entity out of the loaded ones, unless it is being
// opened, held, or its release function refuses. The caller holds l.mu.
func (l *Loaded[T]) tryRelease(s *slot[T]) bool {
	l.examined++
	if !s.mu.TryLock() { // being opened
		return false
	}
	defer s.mu.Unlock()
	u := l.use(s.v)
	if !s.opened || u.holds.Load() > 0 {
		return false
	}
	ok := l.release(s.v, func(synced uint64) {
		if synced > 0 && len(l.synced) < maxSynced {
			l.synced[s.name] = synced
		}
		u.released.Store(true)
	})
	if !ok {
		return false
	}
	s.gone = true
	s.remove()
	delete(l.m, s.name)
	return true
}
