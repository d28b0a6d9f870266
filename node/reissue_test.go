package node_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// replyLosingPublisher publishes everything but the first effect reply of each kind
// (model, tool), which it reports published: those replies are lost on the way.
type replyLosingPublisher struct {
	message.Publisher

	mu   sync.Mutex
	lost map[bool][]messages.EffectKey // by model reply or not
}

func (p *replyLosingPublisher) Publish(topic string, msgs ...*message.Message) error {
	if topic == messages.TopicReplies && len(msgs) == 1 && msgs[0].Metadata.Get(messages.MetaType) != messages.TypeMemoryReply {
		if rep, err := messages.DecodeEffectReply(msgs[0].Payload); err == nil {
			model := rep.Message != nil
			p.mu.Lock()
			lose := len(p.lost[model]) == 0
			if lose {
				p.lost[model] = append(p.lost[model], rep.Key)
			}
			p.mu.Unlock()
			if lose {
				return nil
			}
		}
	}
	return p.Publisher.Publish(topic, msgs...)
}

// TestClusterReissueAfterLostReplies runs the agents on one node and the tools and
// models on another (kfake), which loses the first reply of a model call and of a
// tool call: the agents' node publishes those requests again (Config.EffectReissue),
// the other answers them from the answers it kept, and the session completes, each
// call made once.
func TestClusterReissueAfterLostReplies(t *testing.T) {
	c := newTestCluster(t, 0)
	losing := &replyLosingPublisher{lost: map[bool][]messages.EffectKey{}}
	agents, _ := clusterNode(t, c.k, c.group, c.log, "agents", node.RoleSessions, []tools.Tool{c.led.tool("agents")}, c.calls.model(t, c.log, "agents"),
		func(cfg *node.Config) { cfg.EffectReissue = 300 * time.Millisecond })
	clusterNode(t, c.k, c.group, c.log, "workers", node.RoleTools|node.RoleModels, []tools.Tool{c.led.tool("workers")}, c.calls.model(t, c.log, "workers"),
		func(cfg *node.Config) {
			losing.Publisher = cfg.Bus.Publisher
			cfg.Bus.Publisher = losing
		})

	sessions := submitTasks(t, agents, "reissue", 1)
	waitCompleted(t, agents, sessions, 90*time.Second)

	losing.mu.Lock()
	if len(losing.lost[true]) != 1 || len(losing.lost[false]) != 1 {
		t.Errorf("lost replies %v, want one of a model call and one of a tool call", losing.lost)
	}
	losing.mu.Unlock()
	c.led.mu.Lock()
	for key, n := range c.led.calls {
		if n != 1 {
			t.Errorf("tool call %s made %d times", key, n)
		}
	}
	if len(c.led.calls) != 1 {
		t.Errorf("tool calls %v, want one", c.led.calls)
	}
	c.led.mu.Unlock()
	c.calls.mu.Lock()
	if c.calls.by["workers"] != 2 || c.calls.by["agents"] != 0 {
		t.Errorf("model calls by node %v, want 2 on workers", c.calls.by)
	}
	if v := append(c.led.violations, c.calls.violations...); len(v) > 0 {
		t.Errorf("recorded effects repeated: %v", v)
	}
	c.calls.mu.Unlock()
	if n := metricValue(t, agents, "troupe_cluster_effect_requests_reissued_total"); n < 2 {
		t.Errorf("%v requests published again, want at least 2", n)
	}
}
