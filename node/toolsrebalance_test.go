package node_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
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
	workers := func(name string) {
		s := effectsSub(t, c, c.group+".tools")
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

// effectsSub is a subscriber of the group name whose rebalance timeout (4 s) lets
// a revoked member wait only 2 s for its requests in flight, unless the node
// serving them raises it (holdServedCalls).
func effectsSub(t *testing.T, c *testCluster, name string) *kafka.Subscriber {
	t.Helper()
	s, err := kafka.NewSubscriber(kafka.SubscriberConfig{Brokers: c.k.brokers, ConsumerGroup: name, Topics: c.k.layout(6),
		MaxInFlight: kafka.NodeEffectsInFlight, HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second,
		RebalanceTimeout: 4 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// slowFirstCall makes each task's first model call last delay, and counts the calls
// of each key.
type slowFirstCall struct {
	llm.Model
	delay time.Duration
	mu    *sync.Mutex
	calls map[string]int
}

func (m slowFirstCall) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.calls[r.Key]++
	m.mu.Unlock()
	if r.Step == 1 {
		t := time.NewTimer(m.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return llm.Response{}, ctx.Err()
		}
	}
	return m.Model.Generate(ctx, r)
}

// The models node's variant: a models node joins the models group while another
// performs model calls longer than the 2 s a revoked member waited; each model
// call is performed once, as each tool call above.
func TestModelCallOutlivingAModelsRebalanceIsPerformedOnce(t *testing.T) {
	c := newTestCluster(t, 0)
	var mu sync.Mutex
	calls := map[string]int{}
	started := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range calls {
			n += v
		}
		return n
	}
	workers := func(name string) {
		s := effectsSub(t, c, c.group+".models")
		model := slowFirstCall{Model: c.calls.model(t, c.log, name), delay: 5 * time.Second, mu: &mu, calls: calls}
		clusterNode(t, c.k, c.group, c.log, name, node.RoleModels, nil, model, func(cfg *node.Config) {
			cfg.Bus.Models = s
			cfg.ModelTimeout = 10 * time.Second // the wait's bound: longer than the calls
		})
	}
	workers("m1")
	a, _ := c.node("a", node.RoleSessions|node.RoleTools)
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	sessions := submitTasks(t, a, "modelsrebal", 6)
	waitFor(t, 60*time.Second, "every first model call under way", func() bool { return started() == len(sessions) })
	workers("m2")
	waitCompleted(t, a, sessions, 60*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for key, n := range calls {
		if n != 1 {
			t.Errorf("model call %s performed %d times", key, n)
		}
	}
	if len(calls) != 2*len(sessions) {
		t.Errorf("%d model calls for %d sessions of two steps each", len(calls), len(sessions))
	}
}

// concurrencyOne is a tool that runs one call at a time on a node (tools.Limits):
// the others wait in the node's queue.
type concurrencyOne struct{ tools.Tool }

func (concurrencyOne) Limits() tools.CallLimits { return tools.CallLimits{Concurrency: 1} }

// A tools node that runs one call of its tool at a time holds six sessions' tool
// calls, one running and five queued (they have not started, so their timeouts
// have not either), when a second tools node joins the group. The calls queued
// as the rebalance begins never start on the first node: their requests are left
// unacked (kafka.Subscriber.MessageHandoff, LocalEffects.PerformWhile), and the
// partitions' owners of the next generation perform them; the running one is
// answered before its partition goes. Each is performed once. Before, a queued call
// started during the hold (4 s calls one after another, a 10 s hold: ToolTimeout
// and HandoffGrace) and outlasted it, or started after it, while the next owner
// read its request again and performed it too.
func TestQueuedToolCallsAreLeftToTheNextOwnerInARebalance(t *testing.T) {
	c := newTestCluster(t, 4*time.Second)
	workers := func(name string) {
		s := effectsSub(t, c, c.group+".tools")
		clusterNode(t, c.k, c.group, c.log, name, node.RoleTools|node.RoleModels, nil, c.calls.model(t, c.log, name), func(cfg *node.Config) {
			cfg.Tools = append(cfg.Tools, concurrencyOne{c.led.tool(name)})
			cfg.Bus.Tools = s
			cfg.ToolTimeout = 5 * time.Second // longer than a call, shorter than two
		})
	}
	workers("w1")
	a, _ := c.node("a", node.RoleSessions)
	waitFor(t, 60*time.Second, "node a owns partitions", func() bool { return a.PartitionsOwned() > 0 })
	sessions := submitTasks(t, a, "queuedrebal", 6)
	waitFor(t, 60*time.Second, "every tool call asked for, one under way", func() bool {
		for _, s := range sessions {
			events, err := c.log.Read(context.Background(), s, 1)
			if err != nil || !slices.ContainsFunc(events, func(e messages.Envelope) bool { return e.Type == messages.TypeToolCallRequested }) {
				return false
			}
		}
		c.led.mu.Lock()
		defer c.led.mu.Unlock()
		return len(c.led.calls) == 1
	})
	workers("w2")
	waitCompleted(t, a, sessions, 90*time.Second)
	c.led.mu.Lock()
	defer c.led.mu.Unlock()
	for key, n := range c.led.calls {
		if n != 1 {
			t.Errorf("tool call %s performed %d times", key, n)
		}
	}
	if len(c.led.calls) != len(sessions) {
		t.Errorf("%d tool calls for %d sessions", len(c.led.calls), len(sessions))
	}
	t.Logf("tool calls %d for %d sessions; trace:\n%s", sum(c.led.calls), len(sessions), strings.Join(c.led.trace, "\n"))
}
