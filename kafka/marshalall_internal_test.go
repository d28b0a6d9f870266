package kafka

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// marshalAll, which Publish uses with the DefaultMarshaler, makes the records
// Marshal makes, message by message: the same key, value and headers, each
// record's headers its own (appending to one leaves the next as it was).
func TestMarshalAllMakesTheRecordsMarshalMakes(t *testing.T) {
	m := DefaultMarshaler{}
	var msgs []*message.Message
	for i := range 7 {
		msg := message.NewMessage(fmt.Sprintf("id-%d", i), []byte(fmt.Sprintf(`{"n":%d}`, i)))
		if i != 3 {
			msg.Metadata.Set(messages.MetaSessionID, fmt.Sprintf("s-%d", i%3))
		}
		if i%2 == 0 {
			msg.Metadata.Set(messages.MetaType, "model.responded")
		}
		if i == 5 {
			msg.Metadata.Set(HeaderUUID, "forged") // must not replace the UUID
			msg.Metadata.Set("traceparent", strings.Repeat("t", 55))
		}
		msgs = append(msgs, msg)
	}
	recs := make([]kafkago.Message, len(msgs))
	if err := m.marshalAll("troupe.events", msgs, recs); err != nil {
		t.Fatal(err)
	}
	sorted := func(hs []kafkago.Header) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Key+"="+string(h.Value))
		}
		slices.Sort(out)
		return out
	}
	for i, msg := range msgs {
		want, err := m.Marshal("troupe.events", msg)
		if err != nil {
			t.Fatal(err)
		}
		got := recs[i]
		if got.Topic != want.Topic || string(got.Key) != string(want.Key) || (got.Key == nil) != (want.Key == nil) || string(got.Value) != string(want.Value) {
			t.Errorf("record %d: topic %q key %q value %q, want %q %q %q", i, got.Topic, got.Key, got.Value, want.Topic, want.Key, want.Value)
		}
		if g, w := sorted(got.Headers), sorted(want.Headers); !slices.Equal(g, w) {
			t.Errorf("record %d: headers %q, want %q", i, g, w)
		}
	}
	before := sorted(recs[1].Headers)
	recs[0].Headers = append(recs[0].Headers, kafkago.Header{Key: "extra", Value: []byte("x")})
	recs[0].Headers[0].Value = append(recs[0].Headers[0].Value, "-more"...)
	if after := sorted(recs[1].Headers); !slices.Equal(before, after) {
		t.Errorf("appending to record 0's headers changed record 1's: %q, then %q", before, after)
	}

	// A message without a UUID is refused, as Publish refused it.
	bad := append(slices.Clone(msgs), message.NewMessage("", nil))
	err := m.marshalAll("troupe.events", bad, make([]kafkago.Message, len(bad)))
	if err == nil || !strings.Contains(err.Error(), "has no UUID") {
		t.Errorf("a message without a UUID: %v", err)
	}
}
