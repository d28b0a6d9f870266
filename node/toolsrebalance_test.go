package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/node"
)

// A tools node joins the tools group while another performs tool calls that last
// longer than the group let a revoked member finish its messages (half its
// RebalanceTimeout, here 2 s of 4 s; 15 s of a node's 30 s): the calls' requests
// were delivered again to the new member of their partitions, which performed
// them again while the first performer still ran them (5 of 6 calls twice). Each
// tool call is performed once: a node serving tools holds the requests in hand
// through a rebalance until they are answered, up to its longest tool timeout
// and HandoffGrace (kafka.Subscriber.HoldInFlight, holdServedCalls), and the
// group's RebalanceTimeout is raised to cover that wait.
func TestToolCallOutlivingAToolsRebalanceIsPerformedOnce(t *testing.T) {
	c := newTestCluster(t, 5*time.Second)
	toolsSub := func() *kafka.Subscriber {
		s, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: c.k.brokers, ConsumerGroup: c.group + ".tools", Topics: c.k.layout(6),
			MaxInFlight: kafka.NodeEffectsInFlight, HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second,
			RebalanceTimeout: 4 * time.Second}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	workers := func(name string) {
		s := toolsSub()
		clusterNode(t, c.k, c.group, c.log, name, node.RoleTools|node.RoleModels, nil, c.calls.model(t, c.log, name), func(cfg *node.Config) {
			cfg.Tools = append(cfg.Tools, c.led.tool(name))
			cfg.Bus.Tools = s
			cfg.ToolTimeout = 10 * time.Second // the wait's bound: longer than the calls
		})
	}
	workers("w1")
	a, _ := c.node("a", node.RoleSessions)
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	sessions := submitTasks(t, a, "toolsrebal", 6)
	waitFor(t, 60*time.Second, "every tool call under way", func() bool {
		c.led.mu.Lock()
		defer c.led.mu.Unlock()
		return len(c.led.calls) == len(sessions)
	})
	workers("w2")
	waitCompleted(t, a, sessions, 60*time.Second)
	c.led.mu.Lock()
	defer c.led.mu.Unlock()
	for key, n := range c.led.calls {
		if n != 1 {
			t.Errorf("tool call %s performed %d times", key, n)
		}
	}
	t.Logf("tool calls %d for %d sessions; trace:\n%s", sum(c.led.calls), len(sessions), strings.Join(c.led.trace, "\n"))
}
