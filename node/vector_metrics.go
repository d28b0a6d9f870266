package node

import "github.com/prometheus/client_golang/prometheus"

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
