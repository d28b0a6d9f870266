package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/node"
)

// A consolidation asked of a node that does not own the namespace (node memory
// consolidate, the API's Consolidate) runs on the namespace's owner, as its writes
// and searches do: the node asked writes nothing to the namespace's stream, and
// answers the owner's report. It is so with the consolidator's actors
// (Config.Consolidation) and without. Before, without them it ran the consolidator
// itself, beside the owner's, both planning from the same memories; with them it
// refused (the namespace is consolidated elsewhere) without saying where.
func TestMemoryClusterConsolidateRunsOnTheNamespaceOwner(t *testing.T) {
	for _, actors := range []bool{false, true} {
		t.Run(fmt.Sprint("actors=", actors), func(t *testing.T) {
			var tweak []func(*node.Config)
			if actors {
				tweak = append(tweak, func(cfg *node.Config) {
					cfg.Consolidation = &consolidator.SchedulerConfig{Interval: -1, Threshold: -1}
				})
			}
			consolidateOnTheOwner(t, tweak...)
		})
	}
}

func consolidateOnTheOwner(t *testing.T, tweak ...func(*node.Config)) {
	k := newKafkaEnv(t)
	group := uniqueGroup(t)
	shared := sharedLog(t)
	a := startMemoryClusterNode(t, k, group, shared, "a", tweak...)
	b := startMemoryClusterNode(t, k, group, shared, "b", tweak...)
	waitPartitionsSplit(t, a.n, b.n)
	ns := namespaceOn(t, b, "user:")

	// An important working memory: the consolidator promotes it to episodic.
	a.mustPost(t, `[{"namespace":"`+ns+`","tier":"working","content":"Dana must renew her passport before the trip","importance":0.9},
		{"namespace":"`+ns+`","tier":"working","content":"Dana asked about the weather","importance":0.3},
		{"namespace":"`+ns+`","tier":"semantic","content":"Dana prefers trains to planes"}]`)
	aBefore, bBefore := a.log.memoryAppends(), b.log.memoryAppends()
	if aBefore != 0 {
		t.Fatalf("node a appended %d times to a namespace of node b's", aBefore)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := a.n.Consolidate(ctx, ns, "cli/once")
	if err != nil {
		t.Fatalf("consolidate through node a: %v", err)
	}
	if got := a.log.memoryAppends(); got != 0 {
		t.Errorf("node a appended %d times to a namespace of node b's to consolidate it; its owner consolidates it", got)
	}
	if rep.Namespace != ns || rep.Promoted != 1 {
		t.Errorf("the report: %+v; want the important working memory of %s promoted", rep, ns)
	}
	if got := b.log.memoryAppends() - bBefore; got == 0 {
		t.Errorf("node b, the owner, recorded nothing of the consolidation")
	}
	// The same run asked again, of the owner itself: applies nothing twice.
	again, err := b.n.Consolidate(ctx, ns, "cli/once")
	if err != nil {
		t.Fatalf("consolidate through node b: %v", err)
	}
	if again.Promoted != 0 && again.Promoted != rep.Promoted || a.log.memoryAppends() != 0 {
		t.Errorf("the run asked again: %+v", again)
	}
}
