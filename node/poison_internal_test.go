package node

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	dto "github.com/prometheus/client_model/go"
)

// failingOnce is a publisher whose first publish fails, as one to a topic whose
// partition's broker is down does.
type failingOnce struct {
	calls int
	got   []*message.Message
}

func (f *failingOnce) Publish(_ string, msgs ...*message.Message) error {
	if f.calls++; f.calls == 1 {
		return errors.New("kafka: leader not available")
	}
	f.got = append(f.got, msgs...)
	return nil
}

func (f *failingOnce) Close() error { return nil }

// TestPoisonIsToldOnceItIsSent: a permanent failure whose publish to the poison
// topic fails is handled again (the poison middleware returns the error); it is
// counted and logged as sent once, when the poison topic took it, and its failed
// try is logged as such. The decision used to count and log "sent to the poison
// topic" before the publish, at every try while the poison topic was unavailable.
func TestPoisonIsToldOnceItIsSent(t *testing.T) {
	m := newMetrics()
	var logs bytes.Buffer
	pub := &failingOnce{}
	poison, err := middleware.PoisonQueueWithFilter(poisonPublisher{Publisher: pub, m: m, handler: "tasks", logger: slog.New(slog.NewTextHandler(&logs, nil))}, TopicPoison, isPermanent)
	if err != nil {
		t.Fatal(err)
	}
	h := poison(func(*message.Message) ([]*message.Message, error) {
		return nil, errors.Join(errPermanent, errors.New("task message: not JSON"))
	})
	msg := message.NewMessage(watermill.NewUUID(), []byte("{"))
	if _, err := h(msg); err == nil {
		t.Fatal("the first try, whose poison publish failed, returned no error: the message would be acked and lost")
	}
	if _, err := h(msg); err != nil {
		t.Fatalf("the second try: %v", err)
	}
	var got dto.Metric
	if err := m.poisoned.WithLabelValues("tasks").Write(&got); err != nil {
		t.Fatal(err)
	}
	if n := got.GetCounter().GetValue(); n != 1 {
		t.Errorf("troupe_bus_poisoned_total = %v, want 1", n)
	}
	if len(pub.got) != 1 || !strings.Contains(pub.got[0].Metadata.Get(middleware.ReasonForPoisonedKey), "not JSON") {
		t.Errorf("the poison topic got %d messages", len(pub.got))
	}
	if c := strings.Count(logs.String(), `msg="bus message sent to the poison topic"`); c != 1 || !strings.Contains(logs.String(), "not sent to the poison topic; it is handled again") {
		t.Errorf("%d lines say the message was sent (want 1, and one that the first try was not):\n%s", c, logs.String())
	}
}
