package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The series of the vector projections of the node's memories and knowledge bases,
// by kind ("memory", "knowledge"):
//
//	troupe_vectors_waiting{kind}       vectors the vector store still lacks (or
//	                                   holds and should not), as of each namespace's
//	                                   or base's last operation: it rises while the
//	                                   store is down and falls once it takes them
//	troupe_vectors_parked_total{kind}  vectors the store refused (a vector of
//	                                   another dimension, a payload it does not
//	                                   take), left out of it so that the others of
//	                                   their collection are written

// vectorLog is what the node logs and counts of the vector projection of one kind
// of its stores ("memory", "knowledge"): the keys of an item's owner (a namespace,
// a base) and of the item in its log lines, and their messages.
type vectorLog struct {
	kind, owner, item     string
	failed, back, refused string

	n        *Node
	parkedN  prometheus.Counter
	refusals parkLog
}

// vectorLogs registers the counter of the vectors kind's store refused and
// returns the hooks' maker; its waiting series is registered once the store is
// open (vectorLog.waiting).
func (n *Node) vectorLogs(v *vectorLog) *vectorLog {
	v.n = n
	v.parkedN = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "vectors", Name: "parked_total",
		Help:        "Vectors the vector store refused (another dimension, a payload it does not take), left out of it so that the others of their collection are written.",
		ConstLabels: prometheus.Labels{"kind": v.kind}})
	n.metrics.Registry.MustRegister(v.parkedN)
	return v
}

// waiting registers the series of the vectors waiting for the store, read from
// backlog.
func (v *vectorLog) waiting(backlog func() int) {
	v.n.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "vectors", Name: "waiting",
		Help:        "Vectors waiting to be written to (or deleted from) the vector store, as of each namespace's or knowledge base's last operation.",
		ConstLabels: prometheus.Labels{"kind": v.kind}}, func() float64 { return float64(backlog()) }))
}

// trouble returns the VectorTrouble hook: it calls prev (the configuration's own,
// when set) and logs that the store failed an owner's collection, or takes it again.
func (v *vectorLog) trouble(prev func(owner, coll string, err error)) func(owner, coll string, err error) {
	return func(o, coll string, err error) {
		if prev != nil {
			prev(o, coll, err)
		}
		if err != nil {
			v.n.cfg.Logger.Warn(v.failed, v.owner, o, "collection", coll, "err", err)
		} else {
			v.n.cfg.Logger.Info(v.back, v.owner, o, "collection", coll)
		}
	}
}

// parked returns the VectorParked hook: it calls prev (the configuration's own,
// when set), counts the refused vector and logs it, at most parkLogBurst a minute.
func (v *vectorLog) parked(prev func(owner, coll, id string, err error)) func(owner, coll, id string, err error) {
	return func(o, coll, id string, err error) {
		if prev != nil {
			prev(o, coll, id, err)
		}
		v.parkedN.Inc()
		ok, unlogged := v.refusals.allow(time.Now())
		if unlogged > 0 {
			v.n.cfg.Logger.Error(v.kind+": more vectors the vector store refused were not logged one by one", "count", unlogged)
		}
		if ok {
			v.n.cfg.Logger.Error(v.refused, v.owner, o, "collection", coll, v.item, id, "err", err)
		}
	}
}

// vectorCatchUpEvery is how often a node writes the vectors its memories and
// knowledge bases still owe the vector store (after an outage, or a refusal of
// the store), when they owe some.
const vectorCatchUpEvery = 2 * time.Second

// catchUpVectors writes, every vectorCatchUpEvery, what the vector store still
// lacks of the open memory namespaces and knowledge bases (memory.Memories and
// knowledge.Bases CatchUpVectors), so that vectors left behind by an outage reach
// it without waiting for the next write or search of their namespace or base,
// until ctx is done or the node closes.
func (n *Node) catchUpVectors(ctx context.Context) {
	if n.memories == nil && n.knowledge == nil {
		return
	}
	n.every(ctx, vectorCatchUpEvery, func(time.Time) {
		if n.memories != nil {
			if err := n.memories.CatchUpVectors(ctx); err != nil && ctx.Err() == nil {
				n.cfg.Logger.Debug("catching up the memories' vectors", "err", err)
			}
		}
		if n.knowledge != nil {
			if err := n.knowledge.CatchUpVectors(ctx); err != nil && ctx.Err() == nil {
				n.cfg.Logger.Debug("catching up the knowledge bases' vectors", "err", err)
			}
		}
	})
}

// parkLogBurst bounds the refused vectors a node logs one by one in a minute, per
// kind: a store that refuses every vector of a rebuild (an embedder of another
// size) logs a few of them and then a count, not a line each. The metric counts
// them all.
const parkLogBurst = 10

// parkLog decides which refused vectors are logged. It is safe for concurrent use.
type parkLog struct {
	mu              sync.Mutex
	start           time.Time
	logged, dropped int
}

// allow reports whether a refusal at now is logged, and how many the minute
// before this one left unlogged (to say so once).
func (p *parkLog) allow(now time.Time) (ok bool, unlogged int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.start) >= time.Minute {
		unlogged = p.dropped
		p.start, p.logged, p.dropped = now, 0, 0
	}
	if p.logged < parkLogBurst {
		p.logged++
		return true, unlogged
	}
	p.dropped++
	return false, unlogged
}
