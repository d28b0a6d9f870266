package node

import (
	"context"
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
