package kafka

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/troupe-run/troupe/messages"
)

// HeaderUUID is the record header that carries the Watermill message UUID. It is
// the header Watermill's own Kafka adapter uses, so the two can read each other's
// records.
const HeaderUUID = "_watermill_message_uuid"

// Marshaler converts between Watermill messages and Kafka records.
type Marshaler interface {
	// Marshal builds the record for msg on topic, the name Publish was given
	// (without TopicLayout.Prefix; Publish sets the record's Topic to the Kafka
	// name). The record's Key decides its partition (see Balancer).
	Marshal(topic string, msg *message.Message) (kafkago.Message, error)
	// Unmarshal builds the message for a consumed record (its Topic is the Kafka
	// name, with the prefix).
	Unmarshal(rec kafkago.Message) (*message.Message, error)
}

// DefaultMarshaler puts the payload in the record value, the UUID in the
// HeaderUUID header and every metadata entry in a header of its own. The record key
// is the value of the metadata entry KeyMetadata, so all messages of one session
// land on one partition.
type DefaultMarshaler struct {
	// KeyMetadata names the metadata entry used as the record key (default
	// messages.MetaSessionID, "session_id"). A message without it gets no key and
	// goes to a random partition.
	KeyMetadata string
}

var _ Marshaler = DefaultMarshaler{}

func (m DefaultMarshaler) keyMetadata() string {
	if m.KeyMetadata == "" {
		return messages.MetaSessionID
	}
	return m.KeyMetadata
}

// Marshal implements Marshaler.
func (m DefaultMarshaler) Marshal(topic string, msg *message.Message) (kafkago.Message, error) {
	if msg.UUID == "" {
		return kafkago.Message{}, fmt.Errorf("kafka: message on %s has no UUID", topic)
	}
	// One allocation holds every header's value (the key shares its header's bytes):
	// a session's events carry three headers each.
	h := recordHeaders{
		buf:     make([]byte, 0, headersSize(msg)),
		headers: make([]kafkago.Header, 0, len(msg.Metadata)+1),
	}
	return h.record(topic, msg, m.keyMetadata()), nil
}

// marshalAll is Marshal of each of msgs into recs (as long), with the headers of
// them all in one slice and their values in one buffer: two allocations for a
// Publish call, rather than two for each of its records (a node's outbox
// publishes hundreds of events in a call). Each record's headers are a slice of
// its own, capped, so that nothing appended to one runs over the next.
func (m DefaultMarshaler) marshalAll(topic string, msgs []*message.Message, recs []kafkago.Message) error {
	size, n := 0, 0
	for _, msg := range msgs {
		if msg.UUID == "" {
			_, err := m.Marshal(topic, msg)
			return fmt.Errorf("kafka: marshal message %s for %s: %w", msg.UUID, topic, err)
		}
		size += headersSize(msg)
		n += len(msg.Metadata) + 1
	}
	h := recordHeaders{buf: make([]byte, 0, size), headers: make([]kafkago.Header, 0, n)}
	keyName := m.keyMetadata()
	for i, msg := range msgs {
		recs[i] = h.record(topic, msg, keyName)
	}
	return nil
}

// headersSize is the bytes of the header values of msg's record.
func headersSize(msg *message.Message) int {
	size := len(msg.UUID)
	for _, v := range msg.Metadata {
		size += len(v)
	}
	return size
}

// recordHeaders is where records' headers and their values are written, with
// room made for them beforehand (headersSize, and one header for each metadata
// entry and the UUID): appending never moves what earlier records point to.
type recordHeaders struct {
	buf     []byte
	headers []kafkago.Header
}

func (h *recordHeaders) value(v string) []byte {
	h.buf = append(h.buf, v...)
	return h.buf[len(h.buf)-len(v) : len(h.buf) : len(h.buf)]
}

// record is msg's record on topic, keyed by its metadata entry keyName: the UUID
// in HeaderUUID, every metadata entry in a header of its own.
func (h *recordHeaders) record(topic string, msg *message.Message, keyName string) kafkago.Message {
	start := len(h.headers)
	h.headers = append(h.headers, kafkago.Header{Key: HeaderUUID, Value: h.value(msg.UUID)})
	var key []byte
	for k, v := range msg.Metadata {
		if k == HeaderUUID {
			continue
		}
		h.headers = append(h.headers, kafkago.Header{Key: k, Value: h.value(v)})
		if k == keyName {
			key = h.headers[len(h.headers)-1].Value
		}
	}
	if v, ok := msg.Metadata[keyName]; ok && key == nil {
		key = []byte(v) // keyed by the UUID metadata entry, which has no header of its own
	}
	end := len(h.headers)
	return kafkago.Message{Topic: topic, Key: key, Value: msg.Payload, Headers: h.headers[start:end:end]}
}

// Unmarshal implements Marshaler. It also reads records that other producers wrote
// (kcat, a Java client): a record without a UUID header gets the ID messages.RecordID
// makes of it, stable across redeliveries, and a keyed
// record without the key metadata gets it from the key. A record that gives one
// header name different values keeps the last in its metadata entry, as a map must.
// When that header is one a node decides by (messages.DecidingHeader, in any case:
// kcat -H type=task.submitted -H type=task.cancel) or the UUID header, the record
// also lists its values in messages.MetaRepeatedHeaders, so that its reader can
// refuse it rather than act on one of them; other headers (two b3 or traceparent
// values set by different tools) are not listed. So does a keyed record whose
// header KeyMetadata (session_id) names another value than its key (a producer's
// own session_id header): its metadata entry holds the header's, but the record
// is placed, and its client meant it, by its key. A header without a value (null,
// or empty) is read as absent.
func (m DefaultMarshaler) Unmarshal(rec kafkago.Message) (*message.Message, error) {
	msg := message.NewMessage("", rec.Value) // its UUID is set below
	md := msg.Metadata
	// One string holds the values of all the headers; each is a piece of it.
	size := 0
	for _, h := range rec.Headers {
		size += len(h.Value)
	}
	var values strings.Builder
	values.Grow(size)
	for _, h := range rec.Headers {
		values.Write(h.Value)
	}
	all, at := values.String(), 0
	id, hasID, repeated := "", false, false
	keyName := m.keyMetadata()
	keyDecides := rec.Key != nil && messages.DecidingHeader(keyName)
	for _, h := range rec.Headers {
		value := all[at : at+len(h.Value)]
		at += len(h.Value)
		if value == "" {
			// A header without a value (null: confluent-kafka writes a header given
			// None so; kafka-go reads a null and an empty value alike) says nothing,
			// and is read as absent: a session_id header of "" beside a record's key
			// made a keyed task one of no session, refused with no result.
			continue
		}
		if h.Key == HeaderUUID {
			repeated = repeated || hasID && id != value
			id, hasID = value, true
			continue
		}
		if v, ok := md[h.Key]; ok && v != value && messages.DecidingHeader(h.Key) {
			repeated = true
		}
		if keyDecides && h.Key == keyName && value != string(rec.Key) {
			// The key and the header name two sessions (a producer's own session_id
			// header): read as the header's, the task would run where its key does
			// not say; read as the key's, where its header does not.
			repeated = true
		}
		md[h.Key] = value
	}
	if repeated {
		md[messages.MetaRepeatedHeaders] = repeatedHeaders(rec, keyName)
	}
	if id == "" {
		id = messages.RecordID(rec.Topic, rec.Partition, rec.Offset, rec.Time)
	}
	if rec.Key != nil {
		if _, ok := md[keyName]; !ok {
			md[keyName] = string(rec.Key)
		}
	}
	msg.UUID = id
	return msg, nil
}

// repeatedHeaders lists, for messages.MetaRepeatedHeaders, each occurrence of the
// header names a node decides by (and the UUID header's) that headers give
// different values, in order; and, when a header keyName (a deciding one) names
// another value than the record's key, the key first, as key="…", then each
// occurrence of that header.
func repeatedHeaders(rec kafkago.Message, keyName string) string {
	headers := rec.Headers
	first := map[string]string{}
	differ := map[string]bool{}
	keyDiffers := false
	for _, h := range headers {
		if len(h.Value) == 0 {
			continue // read as absent (Unmarshal)
		}
		if v, ok := first[h.Key]; !ok {
			first[h.Key] = string(h.Value)
		} else if v != string(h.Value) && (h.Key == HeaderUUID || messages.DecidingHeader(h.Key)) {
			differ[h.Key] = true
		}
		if rec.Key != nil && h.Key == keyName && h.Key != HeaderUUID && messages.DecidingHeader(h.Key) && string(h.Value) != string(rec.Key) {
			differ[h.Key], keyDiffers = true, true
		}
	}
	var b strings.Builder
	if keyDiffers {
		b.WriteString("key=")
		b.WriteString(messages.QuoteHead(string(rec.Key)))
	}
	for _, h := range headers {
		if !differ[h.Key] || len(h.Value) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(messages.QuoteHead(h.Key))
		b.WriteByte('=')
		b.WriteString(messages.QuoteHead(string(h.Value)))
	}
	return b.String()
}

// RecordInfo is where a consumed message sits in Kafka.
type RecordInfo struct {
	Topic     string // the Kafka name, with TopicLayout.Prefix
	Partition int
	Offset    int64
	Key       []byte
	Time      time.Time

	// handoff ends once the member begins to give the partition up
	// (Subscriber.MessageHandoff); nil without a partition window.
	handoff context.Context
}

type recordInfoKey struct{}

// Record returns the Kafka position of a message a Subscriber delivered, from the
// message's context.
func Record(ctx context.Context) (RecordInfo, bool) {
	ri, ok := ctx.Value(recordInfoKey{}).(RecordInfo)
	return ri, ok
}

// MessagePartition returns the partition of its topic a message this Subscriber
// delivered was read from (Record's Partition). A sharded node (node.Bus) uses it
// to tell a task that a producer put on a partition other than its session's.
func (s *Subscriber) MessagePartition(msg *message.Message) (int, bool) {
	ri, ok := Record(msg.Context())
	return ri.Partition, ok
}

// MessageCoordinates returns the position of a message this Subscriber delivered
// in its topic, as messages.CoordinatesID: "kafka:<topic>/<partition>/<offset>",
// the topic with TopicLayout.Prefix. The same record read again has the same.
func (s *Subscriber) MessageCoordinates(msg *message.Message) (string, bool) {
	ri, ok := Record(msg.Context())
	if !ok {
		return "", false
	}
	return messages.CoordinatesID(ri.Topic, ri.Partition, ri.Offset), true
}

// MessageTime returns when a message this Subscriber delivered was written to its
// topic (Record's Time: its producer's time, or the broker's for a topic that
// keeps log-append times). A node counts a task's deadline_ms from it. A record
// without a time (timestamp -1, written in the message format before 0.10) has
// none: ok is false.
func (s *Subscriber) MessageTime(msg *message.Message) (time.Time, bool) {
	ri, ok := Record(msg.Context())
	return ri.Time, ok && ri.Time.UnixMilli() > 0
}

// MessageHandoff returns a context that ends once this member begins to give up
// the partition a message this Subscriber delivered was read from: the group
// rebalances (a member joins or leaves), the subscription stops, or the Subscriber
// closes. From then on the message is the partition's next owner's unless it is
// acked within the handoff wait (HandoffWait, Subscriber.HoldInFlight): a handler
// that has not begun the work of a message by then should not begin it, and nack
// it instead (or return an error), so that the next owner does it once. The
// message's own context ends later, when the partition was given up. ok is false
// for a message this Subscriber did not deliver.
func (s *Subscriber) MessageHandoff(msg *message.Message) (handoff context.Context, ok bool) {
	ri, ok := Record(msg.Context())
	if !ok || ri.handoff == nil {
		return nil, false
	}
	return ri.handoff, true
}

// withRecord gives ctx the position of rec, and handoff, the context of its
// partition's handoff (MessageHandoff).
func withRecord(ctx context.Context, rec kafkago.Message, handoff context.Context) context.Context {
	return context.WithValue(ctx, recordInfoKey{}, RecordInfo{
		Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Time: rec.Time,
		handoff: handoff,
	})
}
