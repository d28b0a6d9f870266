package kafka_test

import (
	"strings"
	"testing"
	"time"

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

// TestRecordIDCarriesTheTimestamp: a record with a timestamp (every producer since
// Kafka 0.10 sets one) is named by its coordinates and its timestamp, so that the
// record at the same offset of a topic created again is another task; the ID splits
// back into the coordinates' ID (the one earlier versions gave) and the timestamp.
func TestRecordIDCarriesTheTimestamp(t *testing.T) {
	at := time.UnixMilli(1733395000123).UTC()
	rec := kafkago.Message{Topic: "p.troupe.tasks", Partition: 2, Offset: 99, Time: at, Value: []byte("hello")}
	msg, err := kafka.DefaultMarshaler{}.Unmarshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if msg.UUID != "kafka:p.troupe.tasks/2/99@1733395000123" {
		t.Errorf("UUID %q", msg.UUID)
	}
	rec.Time = at.Add(time.Millisecond)
	if again, _ := (kafka.DefaultMarshaler{}).Unmarshal(rec); again.UUID == msg.UUID {
		t.Errorf("the record at the same offset with another timestamp got the same ID %s", again.UUID)
	}
	coords, ts, ok := messages.SplitRecordID(msg.UUID)
	if !ok || coords != "kafka:p.troupe.tasks/2/99" || !ts.Equal(at) {
		t.Errorf("SplitRecordID(%q) = %q, %v, %v", msg.UUID, coords, ts, ok)
	}
	for _, id := range []string{"kafka:p.troupe.tasks/2/99", "kafka:t/2/99@", "kafka:t/2/99@x", "kafka:t/2@5", "kafka:t/2/-1@5", "kafka:t/2/9@05",
		"x:t/2/99@5", "0f8fad5b-d9cb-469f-a165-70867728950e", "kafka:/2/9@5", "kafka:t/2/9@0"} {
		if c, _, ok := messages.SplitRecordID(id); ok {
			t.Errorf("SplitRecordID(%q) = %q, true; want false", id, c)
		}
	}
}

// BenchmarkUnmarshal reads a record as a node's consumers do for every message:
// one a node wrote (its UUID, session and type headers).
func BenchmarkUnmarshal(b *testing.B) {
	m := kafka.DefaultMarshaler{}
	msg := message.NewMessage("0f8fad5b-d9cb-469f-a165-70867728950e", make([]byte, 600))
	msg.Metadata.Set(messages.MetaSessionID, "session-42")
	msg.Metadata.Set(messages.MetaType, "model.responded")
	rec, err := m.Marshal("troupe.events", msg)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Unmarshal(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// A record that gives one header name different values (kcat -H type=a -H type=b)
// keeps the last in the metadata, and, for a header a node decides by
// (messages.DecidingHeader, in any case) or the UUID, lists every occurrence, in
// order, in messages.MetaRepeatedHeaders: its reader sees the conflict. Repeating a
// header with the same value, giving it once, or repeating one a node does not
// decide by (b3, traceparent) sets nothing.
func TestDefaultMarshalerRepeatedHeaders(t *testing.T) {
	h := func(k, v string) kafkago.Header { return kafkago.Header{Key: k, Value: []byte(v)} }
	long := strings.Repeat("x", 100)
	cases := []struct {
		name    string
		headers []kafkago.Header
		want    string
		typ     string
	}{
		{"once", []kafkago.Header{h("type", "task.cancel"), h("Type", "task.submitted")}, "", "task.cancel"},
		{"same value", []kafkago.Header{h("type", "task.cancel"), h("session_id", "s"), h("type", "task.cancel")}, "", "task.cancel"},
		{"two values", []kafkago.Header{h("type", "task.submitted"), h("session_id", "s"), h("type", "task.cancel")},
			`"type"="task.submitted", "type"="task.cancel"`, "task.cancel"},
		{"three, two alike", []kafkago.Header{h("type", "a"), h("type", "a"), h("type", "b")},
			`"type"="a", "type"="a", "type"="b"`, "b"},
		{"UUID", []kafkago.Header{h(kafka.HeaderUUID, "id-1"), h(kafka.HeaderUUID, "id-2")},
			`"_watermill_message_uuid"="id-1", "_watermill_message_uuid"="id-2"`, ""},
		{"long value", []kafkago.Header{h("type", long), h("type", "b")},
			`"type"="` + long[:64] + `"… (100 bytes), "type"="b"`, "b"},
		// A node reads any case of the type: Type given two values is flagged too.
		{"Type in another case", []kafkago.Header{h("Type", "task.submitted"), h("Type", "task.cancel")},
			`"Type"="task.submitted", "Type"="task.cancel"`, ""},
		{"session", []kafkago.Header{h("session_id", "a"), h("type", "task.cancel"), h("session_id", "b")},
			`"session_id"="a", "session_id"="b"`, "task.cancel"},
		// Headers a node does not decide by: tracing headers that two tools (or a
		// proxy) each set, a producer's own. Only the deciding ones are listed.
		{"tracing headers", []kafkago.Header{h("b3", "80f198ee56343ba8-e457b5a2e4d86bd1-1"), h("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
			h("type", "task.cancel"), h("b3", "0af7651916cd43dd-00f067aa0ba902b7-0"), h("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), h("X-Request-Id", "r1"), h("x-request-id", "r2"), h("X-Request-Id", "r3")},
			"", "task.cancel"},
		{"tracing and type", []kafkago.Header{h("b3", "1"), h("type", "task.submitted"), h("b3", "2"), h("type", "task.cancel")},
			`"type"="task.submitted", "type"="task.cancel"`, "task.cancel"},
	}
	for _, c := range cases {
		msg, err := kafka.DefaultMarshaler{}.Unmarshal(kafkago.Message{Topic: "troupe.tasks", Headers: c.headers})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, ok := msg.Metadata[messages.MetaRepeatedHeaders]
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %s = %q (set: %v); want %q", c.name, messages.MetaRepeatedHeaders, got, ok, c.want)
		}
		if typ := msg.Metadata.Get(messages.MetaType); typ != c.typ {
			t.Errorf("%s: type %q; want %q", c.name, typ, c.typ)
		}
	}
}

// A keyed record whose session_id header names another session than its key (a
// producer's own header of that name) is listed in messages.MetaRepeatedHeaders,
// the key first: read as the header's session, a task ran where its key did not
// say. The same value in both, a record without a key, or no such header, sets
// nothing; the key's metadata entry is the header's, as before.
func TestDefaultMarshalerKeyAndSessionHeaderDiffer(t *testing.T) {
	h := func(k, v string) kafkago.Header { return kafkago.Header{Key: k, Value: []byte(v)} }
	cases := []struct {
		name    string
		key     []byte
		headers []kafkago.Header
		want    string
		session string
	}{
		{"differ", []byte("s-1"), []kafkago.Header{h("session_id", "web-1")}, `key="s-1", "session_id"="web-1"`, "web-1"},
		{"same", []byte("s-1"), []kafkago.Header{h("session_id", "s-1")}, "", "s-1"},
		{"no key", nil, []kafkago.Header{h("session_id", "web-1")}, "", "web-1"},
		{"no header", []byte("s-1"), []kafkago.Header{h("type", "task.cancel")}, "", "s-1"},
		{"other case", []byte("s-1"), []kafkago.Header{h("Session_Id", "web-1")}, "", "s-1"},
		{"repeated, one the key's", []byte("s-1"), []kafkago.Header{h("session_id", "s-1"), h("session_id", "web-1")},
			`key="s-1", "session_id"="s-1", "session_id"="web-1"`, "web-1"},
	}
	for _, c := range cases {
		msg, err := kafka.DefaultMarshaler{}.Unmarshal(kafkago.Message{Topic: "troupe.tasks", Key: c.key, Headers: c.headers})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := msg.Metadata[messages.MetaRepeatedHeaders]; got != c.want {
			t.Errorf("%s: %s = %q; want %q", c.name, messages.MetaRepeatedHeaders, got, c.want)
		}
		if got := msg.Metadata.Get(messages.MetaSessionID); got != c.session {
			t.Errorf("%s: session %q; want %q", c.name, got, c.session)
		}
	}
}

// messages.RepeatedHeaderNames reads back the names of the headers the
// marshaler lists in messages.MetaRepeatedHeaders, and whether it lists the
// key, whatever their values hold: quotes, the list's own separators and a
// name's form, a value cut by its head (in the middle of a multi-byte
// character), a key that is no UTF-8. A list of another form is not read.
func TestRepeatedHeaderNamesReadsTheMarshalersList(t *testing.T) {
	h := func(k, v string) kafkago.Header { return kafkago.Header{Key: k, Value: []byte(v)} }
	hostile := `a", "session_id"="b`
	cut := strings.Repeat("x", 63) + "é" + strings.Repeat("y", 40)
	cases := []struct {
		name    string
		key     []byte
		headers []kafkago.Header
		names   []string
		hasKey  bool
	}{
		{"type", nil, []kafkago.Header{h("type", "task.submitted"), h("type", "task.cancel")}, []string{"type"}, false},
		{"a value holding the list's form", nil, []kafkago.Header{h("type", hostile), h("type", "x")}, []string{"type"}, false},
		{"a value cut", nil, []kafkago.Header{h("Type", cut), h("Type", cut+"z")}, []string{"Type"}, false},
		{"the UUID and the type", nil, []kafkago.Header{h(kafka.HeaderUUID, "m-1"), h("type", "a"), h(kafka.HeaderUUID, "m-2"), h("type", "b")},
			[]string{kafka.HeaderUUID, "type"}, false},
		{"the key", []byte("s-1\xff" + hostile), []kafkago.Header{h("session_id", hostile)}, []string{"session_id"}, true},
	}
	for _, c := range cases {
		msg, err := kafka.DefaultMarshaler{}.Unmarshal(kafkago.Message{Topic: "troupe.tasks", Key: c.key, Headers: c.headers})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		list := msg.Metadata[messages.MetaRepeatedHeaders]
		names, key, ok := messages.RepeatedHeaderNames(list)
		if !ok || key != c.hasKey || strings.Join(names, "|") != strings.Join(c.names, "|") {
			t.Errorf("%s: RepeatedHeaderNames(%q) = %q, key %v, %v; want %q, key %v", c.name, list, names, key, ok, c.names, c.hasKey)
		}
	}
	for _, list := range []string{"", "type=a, type=b", `"type"="a"; "type"="b"`, `"type"="a", `, `"type"`, `"type"="a"… (90`, `key=s-1`} {
		if names, key, ok := messages.RepeatedHeaderNames(list); ok {
			t.Errorf("RepeatedHeaderNames(%q) = %q, key %v, true; want false", list, names, key)
		}
	}
}
