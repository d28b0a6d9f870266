package kafka

import (
	"context"
	"net"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/createtopics"
	"github.com/twmb/franz-go/pkg/kfake"
)

// cutShort is a transport whose CreateTopics requests reach the broker (which
// creates the topic) while the caller's context runs out before the answer.
type cutShort struct{ kafkago.RoundTripper }

func (c cutShort) RoundTrip(ctx context.Context, addr net.Addr, req protocol.Message) (protocol.Message, error) {
	if _, ok := req.(*createtopics.Request); ok {
		_, _ = c.RoundTripper.RoundTrip(context.Background(), addr, req)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.RoundTripper.RoundTrip(ctx, addr, req)
}

// A creation the caller's deadline (the Publish's) cuts short on its first
// request is settled as one that may have created the topic: the broker may
// have, as here. Before, it was settled as made by nobody, and a policy counting
// created topics (node.ReplyTopics) gave its slot back for a topic that exists.
func TestSettledSaysMaybeCreatedForACreationCutShort(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var settled []bool
	layout := TopicLayout{InitializeTopics: true, Default: TopicConfig{Partitions: 1},
		Creatable: func(_ string, tc TopicConfig) (TopicConfig, error) { return tc, nil },
		Settled:   func(_ string, created bool) { settled = append(settled, created) }}
	tr := newTransport(c.ListenAddrs(), "test", 5*time.Second, time.Minute)
	a := admin{client: &kafkago.Client{Addr: kafkago.TCP(c.ListenAddrs()...), Transport: cutShort{tr}, Timeout: 10 * time.Second}, layout: layout}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := a.ensureTopic(ctx, "slow", "slow"); err == nil {
		t.Fatal("a creation cut short by its context: no error")
	}
	if len(settled) != 1 || !settled[0] {
		t.Errorf("Settled: %v; want [true] (the topic may have been created)", settled)
	}
}

// hanging is a transport to a broker that never answers: every request waits for
// its context to end.
type hanging struct{}

func (hanging) RoundTrip(ctx context.Context, _ net.Addr, _ protocol.Message) (protocol.Message, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A creation whose context the reads before it used up sends no CreateTopics
// request, and is settled as made by nobody. Before, it was settled as one that
// may have created the topic, and node.ReplyTopics kept a place under
// --reply-topics-max for every reply topic tried while a broker did not answer.
func TestSettledSaysNotCreatedForARequestNeverSent(t *testing.T) {
	var settled []bool
	layout := TopicLayout{InitializeTopics: true, Default: TopicConfig{Partitions: 1},
		Creatable: func(_ string, tc TopicConfig) (TopicConfig, error) { return tc, nil },
		Settled:   func(_ string, created bool) { settled = append(settled, created) }}
	a := admin{client: &kafkago.Client{Addr: kafkago.TCP("127.0.0.1:1"), Transport: hanging{}, Timeout: 10 * time.Second}, layout: layout}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := a.ensureTopic(ctx, "unreachable", "unreachable"); err == nil {
		t.Fatal("a creation on a broker that never answers: no error")
	}
	for _, created := range settled {
		if created {
			t.Errorf("Settled: %v; want no creation claimed (no request was sent while the context lived)", settled)
		}
	}
}
