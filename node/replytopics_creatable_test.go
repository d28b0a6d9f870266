package node_test

import (
	"errors"
	"testing"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/node"
)

// ReplyTopics.Creatable used without Settled (a layout that sets only Creatable)
// counts as it did before Settled existed: each reply topic allowed keeps its
// place and is counted by Created, asked again it takes none, and the one past
// Max is refused. Before, such topics stayed "being created" for good and
// Created said none.
func TestReplyTopicsCreatableWithoutSettledCountsOnAllow(t *testing.T) {
	rt := &node.ReplyTopics{Create: []string{"replies."}, Max: 2}
	for _, topic := range []string{"replies.a", "replies.a", "replies.b", "replies.a"} {
		if _, err := rt.Creatable(topic, kafka.TopicConfig{}); err != nil {
			t.Fatalf("%s: %v; want it allowed", topic, err)
		}
	}
	if got := rt.Created(); got != 2 {
		t.Errorf("Created() = %d; want 2 (the topics allowed)", got)
	}
	if _, err := rt.Creatable("replies.c", kafka.TopicConfig{}); !errors.Is(err, node.ErrReplyTopicNotCreated) {
		t.Errorf("the third distinct topic: %v; want ErrReplyTopicNotCreated", err)
	}
}
