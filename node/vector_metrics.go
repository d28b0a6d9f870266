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

// vectorSeries registers the series of kind, waiting read from waiting, and returns
// the counter of parked vectors.
func vectorSeries(reg prometheus.Registerer, kind string, waiting func() int) prometheus.Counter {
	labels := prometheus.Labels{"kind": kind}
	parked := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "troupe", Subsystem: "vectors", Name: "parked_total",
		Help:        "Vectors the vector store refused (another dimension, a payload it does not take), left out of it so that the others of their collection are written.",
		ConstLabels: labels})
	reg.MustRegister(parked, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "troupe", Subsystem: "vectors", Name: "waiting",
		Help:        "Vectors waiting to be written to (or deleted from) the vector store, as of each namespace's or knowledge base's last operation.",
		ConstLabels: labels}, func() float64 { return float64(waiting()) }))
	return parked
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
	t := time.NewTicker(vectorCatchUpEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.stopping:
			return
		case <-t.C:
		}
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
	}
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

// vectorParked returns the VectorParked hook of the memories or the knowledge
// bases (kind): it calls prev (the configuration's own, when set), counts the
// refused vector in parked and logs it as msg, with its owner (a namespace, a
// base) and its item under the keys owner and item, at most parkLogBurst a minute.
func (n *Node) vectorParked(prev func(owner, coll, id string, err error), parked prometheus.Counter, kind, msg, owner, item string) func(owner, coll, id string, err error) {
	var pl parkLog
	return func(o, coll, id string, err error) {
		if prev != nil {
			prev(o, coll, id, err)
		}
		parked.Inc()
		ok, unlogged := pl.allow(time.Now())
		if unlogged > 0 {
			n.cfg.Logger.Error(kind+": more vectors the vector store refused were not logged one by one", "count", unlogged)
		}
		if ok {
			n.cfg.Logger.Error(msg, owner, o, "collection", coll, item, id, "err", err)
		}
	}
}
