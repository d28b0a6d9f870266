package kafka

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// NodeClients are the Kafka clients one Troupe node uses:
//   - Publisher;
//   - Group: the consumer group the nodes share on troupe.tasks, so each partition,
//     and each session keyed to it, has one owner; its rebalances are reported to the
//     Owner set with SetOwner; NodeTasksInFlight messages in flight per partition (a
//     node handles the tasks of different sessions at once, and one session's in
//     order);
//   - Tools and Models: consumer groups of their own (<group>.tools, <group>.models) on
//     the internal request topics, so nodes that serve tools or models can come and go
//     without moving sessions; NodeEffectsInFlight requests in flight per partition
//     (the calls of many sessions keyed to one partition run at once); a node
//     serving them raises their handoff wait and rebalance timeout to its longest
//     call (Subscriber.HoldInFlight), so that a rebalance does not hand a request
//     still being performed to another node;
//   - Live: no group, every partition from the latest offset, for the node's live event
//     streams and the replies to its effect requests.
type NodeClients struct {
	Publisher *Publisher
	Group     *Subscriber
	Tools     *Subscriber
	Models    *Subscriber
	Live      *Subscriber

	owner *ownerListener
}

// Owner is told which partitions of the tasks topic a node owns; node.Node is one.
type Owner interface {
	// Assigned: the node owns partitions (of total) until the next Revoked.
	Assigned(partitions []int, total int)
	// Revoked: the node owns nothing; it returns once its work on them stopped.
	Revoked()
}

// Group timing of a node's consumer groups: a node that dies is noticed after
// SessionTimeout, and its partitions move then. A node handing its sessions over
// (Owner.Revoked) keeps its membership past SessionTimeout (the subscription
// heartbeats meanwhile) but not past RebalanceTimeout: node.Node.Revoked bounds
// itself below it. A node whose process stopped running for NodeSessionTimeout
// less NodeHeartbeat or more counts itself evicted (the node package's pause
// watch).
const (
	NodeHeartbeat        = time.Second
	NodeSessionTimeout   = 10 * time.Second
	NodeRebalanceTimeout = 30 * time.Second
)

// NodeTasksInFlight is the MaxInFlight of a node's Group: how many tasks of one
// partition of troupe.tasks a node has in hand at once.
const NodeTasksInFlight = 64

// NodeEffectsInFlight is the MaxInFlight of a node's Tools and Models: how many
// requests of one partition of troupe.tool.requests (troupe.model.requests) a node
// performs at once. With one, a node performed one call per partition at a time:
// a cluster whose tools (or models) run on nodes of their own ran at most as many
// calls at once as the topic has partitions, and a slow call held up every call
// of the sessions keyed to its partition. Calls are independent of each other
// (each is keyed, and the effects' flight table joins two of one key), so they
// need no order; the subscriber still commits a partition's offsets in order, so
// a node that dies leaves the requests not answered yet to the next one.
const NodeEffectsInFlight = 64

// DialNode builds a node's clients. group names the consumer group the nodes share.
func DialNode(brokers []string, group string, topics TopicLayout, logger watermill.LoggerAdapter) (*NodeClients, error) {
	c := &NodeClients{owner: &ownerListener{}}
	var err error
	if c.Publisher, err = NewPublisher(PublisherConfig{Brokers: brokers, Topics: topics}, logger); err != nil {
		return nil, err
	}
	groupCfg := func(name string, l RebalanceListener) SubscriberConfig {
		return SubscriberConfig{Brokers: brokers, ConsumerGroup: name, Topics: topics, Rebalance: l,
			HeartbeatInterval: NodeHeartbeat, SessionTimeout: NodeSessionTimeout, RebalanceTimeout: NodeRebalanceTimeout}
	}
	tasksCfg := groupCfg(group, c.owner)
	tasksCfg.MaxInFlight = NodeTasksInFlight
	effectsCfg := func(name string) SubscriberConfig {
		cfg := groupCfg(name, nil)
		cfg.MaxInFlight = NodeEffectsInFlight
		return cfg
	}
	for _, s := range []struct {
		sub *(*Subscriber)
		cfg SubscriberConfig
	}{
		{&c.Group, tasksCfg},
		{&c.Tools, effectsCfg(group + ".tools")},
		{&c.Models, effectsCfg(group + ".models")},
		{&c.Live, SubscriberConfig{Brokers: brokers, InitialOffset: FromLatest, Topics: topics}},
	} {
		if *s.sub, err = NewSubscriber(s.cfg, logger); err != nil {
			return nil, errors.Join(err, c.Close())
		}
	}
	return c, nil
}

// SetOwner names the node told about Group's partitions. Call it before the node
// subscribes (a node is built after its clients and subscribes when it runs).
func (c *NodeClients) SetOwner(o Owner) { c.owner.o.Store(&o) }

// Close closes the subscribers, then the publisher (which flushes).
func (c *NodeClients) Close() error {
	var errs []error
	for _, s := range []*Subscriber{c.Group, c.Tools, c.Models, c.Live} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if c.Publisher != nil {
		errs = append(errs, c.Publisher.Close())
	}
	return errors.Join(errs...)
}

// PartitionOf is Partition for a string key: the partition of topic's numPartitions
// that a session's messages go to.
func PartitionOf(sessionID string, numPartitions int) int {
	return Partition([]byte(sessionID), numPartitions)
}

// ownerListener forwards a subscription's rebalances to the Owner set later.
type ownerListener struct {
	o atomic.Pointer[Owner]
}

func (l *ownerListener) Assigned(a Assignment) {
	if o := l.o.Load(); o != nil {
		(*o).Assigned(a.Partitions, a.Total)
	}
}

func (l *ownerListener) Revoked(Assignment) {
	if o := l.o.Load(); o != nil {
		(*o).Revoked()
	}
}
