package kafka

import (
	"errors"

	"github.com/ThreeDotsLabs/watermill"
)

// NodeClients are the Kafka clients one Troupe node uses: a publisher, a subscriber
// in the consumer group the nodes share (so each partition, and each session keyed to
// it, has one owner), and a subscriber in no group that reads every partition from the
// latest offset (for the node's live event streams).
type NodeClients struct {
	Publisher *Publisher
	Group     *Subscriber
	Live      *Subscriber
}

// DialNode builds a node's clients. group names the shared consumer group.
func DialNode(brokers []string, group string, topics TopicLayout, logger watermill.LoggerAdapter) (*NodeClients, error) {
	pub, err := NewPublisher(PublisherConfig{Brokers: brokers, Topics: topics}, logger)
	if err != nil {
		return nil, err
	}
	sub, err := NewSubscriber(SubscriberConfig{Brokers: brokers, ConsumerGroup: group, Topics: topics}, logger)
	if err != nil {
		return nil, errors.Join(err, pub.Close())
	}
	live, err := NewSubscriber(SubscriberConfig{Brokers: brokers, InitialOffset: FromLatest, Topics: topics}, logger)
	if err != nil {
		return nil, errors.Join(err, pub.Close(), sub.Close())
	}
	return &NodeClients{Publisher: pub, Group: sub, Live: live}, nil
}

// Close closes the subscribers, then the publisher (which flushes).
func (c *NodeClients) Close() error {
	return errors.Join(c.Group.Close(), c.Live.Close(), c.Publisher.Close())
}
