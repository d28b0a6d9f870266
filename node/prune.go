package node

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/troupe-run/troupe/eventlog"
)

// pruneBatch bounds the streams one PruneStreams call deletes: on ClickHouse
// each call is a mutation of every table that holds them.
const pruneBatch = 1000

// storedRetention is the node's Bus.StoredRetention, its default applied.
func (n *Node) storedRetention() time.Duration {
	if r := n.cfg.Bus.StoredRetention; r != 0 {
		return r
	}
	return DefaultStoredRetention
}

// pruneEvery is how often a node prunes the stored bus messages: an eighth of the
// retention, within [100 ms, 6 h].
func pruneEvery(retention time.Duration) time.Duration {
	return min(max(retention/8, 100*time.Millisecond), 6*time.Hour)
}

// pruneStored deletes the messages too large for the bus that the log has kept for
// longer than the retention (eventlog.Pruner), every pruneEvery, the first time
// after a random part of it (so that the nodes of a cluster, each of which prunes,
// seldom do at once), until ctx is done or the node closes. Every node may prune:
// a stream two nodes prune at once is deleted once.
func (n *Node) pruneStored(ctx context.Context, p eventlog.Pruner) {
	retention := n.storedRetention()
	every := pruneEvery(retention)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(every))) + 1)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.stopping:
			return
		case <-t.C:
		}
		before := n.cfg.Clock.Now().Add(-retention).UnixMicro()
		total, err := eventlog.PruneAll(ctx, p, eventlog.BusStreamPrefix, before, pruneBatch)
		if err != nil && ctx.Err() == nil {
			n.cfg.Logger.Warn("pruning the stored bus messages failed; trying again later", "pruned", total, "err", err)
		}
		if total > 0 {
			n.metrics.storedPruned.Add(float64(total))
			n.cfg.Logger.Info("pruned stored bus messages", "streams", total, "older_than", retention)
		}
		t.Reset(every)
	}
}
