package node

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// poisonCopies records what the poison topic is given.
type poisonCopies struct{ got []*message.Message }

func (p *poisonCopies) Publish(_ string, msgs ...*message.Message) error {
	p.got = append(p.got, msgs...)
	return nil
}

func (p *poisonCopies) Close() error { return nil }

// A record refused for good and read again (its offset not committed when the
// node's group rebalanced, or the commit failed) was copied to troupe.poison
// again at each read. A node copies a record once (its position is the copy's
// key, RecordPoisonedKey); another record, or the same ID at another position,
// is copied as it comes.
func TestPoisonCopiesARecordReadAgainOnce(t *testing.T) {
	pub := &poisonCopies{}
	at := map[*message.Message]string{}
	record := func(msg *message.Message) (string, bool) {
		key, ok := at[msg]
		return key, ok
	}
	poison, err := middleware.PoisonQueueWithFilter(poisonPublisher{Publisher: pub, m: newMetrics(), handler: "tasks",
		logger: slog.New(slog.DiscardHandler), record: record, sent: newPoisonedRecords()}, TopicPoison, isPermanent)
	if err != nil {
		t.Fatal(err)
	}
	h := poison(func(*message.Message) ([]*message.Message, error) {
		return nil, errors.Join(errPermanent, errors.New("task message: not JSON"))
	})
	read := func(uuid, pos string) {
		msg := message.NewMessage(uuid, []byte("{"))
		at[msg] = pos
		if _, err := h(msg); err != nil {
			t.Fatal(err)
		}
	}
	read("a", "kafka:troupe.tasks/0/7")
	read("a", "kafka:troupe.tasks/0/7") // read again
	read("a", "kafka:troupe.tasks/0/9") // another record under the same ID
	if len(pub.got) != 2 {
		t.Fatalf("%d copies on the poison topic; want 2 (the record read again once)", len(pub.got))
	}
	for i, want := range []string{"kafka:troupe.tasks/0/7", "kafka:troupe.tasks/0/9"} {
		if got := pub.got[i].Metadata.Get(RecordPoisonedKey); got != want {
			t.Errorf("copy %d: %s %q; want %q", i, RecordPoisonedKey, got, want)
		}
	}
}
