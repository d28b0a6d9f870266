package memory

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/internal/entity"
)

// The defaults of the passivation of namespaces (Config.IdleTimeout,
// Config.MaxNamespaces).
const (
	DefaultIdleTimeout   = 10 * time.Minute
	DefaultMaxNamespaces = 1000
	// DefaultVectorRetry is the default of Config.VectorRetry.
	DefaultVectorRetry = 2 * time.Minute
)

// Memories keeps its namespaces in an entity.Loaded (Memories.spaces), whose doc
// says when a namespace is loaded and released.

// releaseNamespace is the release function of Memories' entity.Loaded: a
// namespace in use (its lock taken), or whose vectors the store still lacks (what
// it lacks would wait for its next use), stays.
func releaseNamespace(ns *Namespace, let func(synced uint64)) bool {
	if !ns.mu.TryLock() {
		return false
	}
	defer ns.mu.Unlock()
	p := ns.pj
	if len(p.dirty) > 0 || len(p.stale) > 0 || p.backlog > 0 {
		return false
	}
	var synced uint64
	if len(p.parked) == 0 {
		synced = ns.st.seq
	}
	// Its parked vectors are tried again when it is loaded again.
	ns.m.parkedN.Add(-p.parkedN)
	p.parkedN = 0
	let(synced)
	return true
}

// LoadedNamespaces is the number of namespaces this process holds in memory,
// folded (see Config.IdleTimeout and Config.MaxNamespaces).
func (m *Memories) LoadedNamespaces() int { return m.spaces.Count() }

// ReleaseIdle releases the namespaces unused for IdleTimeout, and the least
// recently used ones past MaxNamespaces (see Config.IdleTimeout), now: a node does
// it in its background catch-up (CatchUpVectors), and the opening of a namespace
// does it too. It returns how many it released.
func (m *Memories) ReleaseIdle() int {
	return m.spaces.Sweep(m.cfg.Now(), m.cfg.IdleTimeout, m.cfg.MaxNamespaces, true, "")
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
	return ns, m.spaces.Hold(ns, m.cfg.Now), nil
}

// namespaceUse is what a Namespace keeps of its passivation.
type namespaceUse struct {
	use entity.Use
	// parkDue is when the first of its parked vectors may be tried again, in
	// Unix ns of the wall clock (0: none parked)
	parkDue atomic.Int64
}
