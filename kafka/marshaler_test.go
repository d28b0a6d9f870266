package kafka_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/kafka"
	"github.com/troupe-run/troupe/messages"
)

func TestDefaultMarshalerRoundTrip(t *testing.T) {
	m := kafka.DefaultMarshaler{}
	msg := message.NewMessage("id-1", []byte(`{"x":1}`))
	msg.Metadata.Set(messages.MetaSessionID, "s-42")
	msg.Metadata.Set(messages.MetaType, "task.submitted")
	msg.Metadata.Set(kafka.HeaderUUID, "forged") // must not replace the UUID

	rec, err := m.Marshal("troupe.tasks", msg)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Topic != "troupe.tasks" || string(rec.Key) != "s-42" || string(rec.Value) != `{"x":1}` {
		t.Fatalf("record: topic %q key %q value %q", rec.Topic, rec.Key, rec.Value)
	}
	uuids := 0
	for _, h := range rec.Headers {
		if h.Key == kafka.HeaderUUID {
			uuids++
			if string(h.Value) != "id-1" {
				t.Errorf("UUID header %q", h.Value)
			}
		}
	}
	if uuids != 1 {
		t.Errorf("%d UUID headers, want 1", uuids)
	}

	rec.Partition, rec.Offset = 3, 17
	back, err := m.Unmarshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if back.UUID != "id-1" || string(back.Payload) != `{"x":1}` {
		t.Errorf("round trip: UUID %q payload %q", back.UUID, back.Payload)
	}
	if back.Metadata.Get(messages.MetaSessionID) != "s-42" || back.Metadata.Get(messages.MetaType) != "task.submitted" {
		t.Errorf("round trip metadata: %v", back.Metadata)
	}
	if _, ok := back.Metadata[kafka.HeaderUUID]; ok {
		t.Errorf("the UUID header leaked into the metadata: %v", back.Metadata)
	}
}

func TestDefaultMarshalerKey(t *testing.T) {
	msg := message.NewMessage("id", nil)
	rec, err := kafka.DefaultMarshaler{}.Marshal("t", msg)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Key != nil {
		t.Errorf("a message without session_id got key %q; want none (random partition)", rec.Key)
	}
	msg.Metadata.Set("tenant", "acme")
	rec, err = kafka.DefaultMarshaler{KeyMetadata: "tenant"}.Marshal("t", msg)
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Key) != "acme" {
		t.Errorf("key from KeyMetadata: %q", rec.Key)
	}
	if _, err := (kafka.DefaultMarshaler{}).Marshal("t", message.NewMessage("", nil)); err == nil {
		t.Error("a message without UUID was marshaled")
	}
}

// TestDefaultMarshalerForeignRecord reads a record another client wrote (kcat -k
// s-7): no UUID header, a key, no metadata.
func TestDefaultMarshalerForeignRecord(t *testing.T) {
	rec := kafkago.Message{Topic: "troupe.tasks", Partition: 2, Offset: 99, Key: []byte("s-7"), Value: []byte("hello")}
	msg, err := kafka.DefaultMarshaler{}.Unmarshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if msg.UUID != "kafka:troupe.tasks/2/99" {
		t.Errorf("UUID %q: want one derived from the record's position, stable across redeliveries", msg.UUID)
	}
	if msg.Metadata.Get(messages.MetaSessionID) != "s-7" {
		t.Errorf("session_id %q: want the record key", msg.Metadata.Get(messages.MetaSessionID))
	}
}
