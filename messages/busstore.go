package messages

import (
	"encoding/json"
	"fmt"
)

// A message too large for the bus (BusMessageMax: a model call with a long
// conversation, a model's very long answer, a long task) travels as a claim check:
// the message, whole, is appended as the one BusStored event of a stream of its own
// in the log every node of a cluster shares, and the bus carries a reference that names
// the stream (EffectRequest.Stored, EffectReply.Stored, or the header MetaStored of
// a task). The reader of a reference reads the stream and goes on with the message it
// holds. The event's ID is the stream's, so storing a message again (a request
// issued again, a call performed again) is a no-op that keeps the first: every reference
// names the same message.

// BusStreamPrefix starts the ID of every stream of the log that holds a message too
// large for the bus (eventlog.NonSessionPrefixes): bus/<kind>/<id>.
const BusStreamPrefix = "bus/"

// The kinds of stored message, the second part of the stream's ID.
const (
	BusStoredRequest = "request" // an EffectRequest, by its key
	BusStoredReply   = "reply"   // an EffectReply, by its key
	BusStoredTask    = "task"    // a task's envelope on TopicTasks, by its ID
)

// TypeBusStored is the event of a stream that holds a message too large for the bus.
const TypeBusStored Type = "bus.stored"

// BusStored is the one event of a stream that holds a message too large for the bus:
// the message's body as it would have gone on the bus.
type BusStored struct {
	Message json.RawMessage `json:"message"`
}

// MessageType implements Payload.
func (*BusStored) MessageType() Type { return TypeBusStored }

// BusStream is the stream that holds the stored message of kind named id.
func BusStream(kind, id string) string { return BusStreamPrefix + kind + "/" + id }

// EffectStream is the stream that holds the stored request or reply
// (BusStoredRequest, BusStoredReply) of the effect key.
func EffectStream(kind string, key EffectKey) string { return BusStream(kind, key.String()) }

// BusStoredEvent is the event that stores body in stream: seq 1, its ID the
// stream's, stamped at ts (Unix microseconds).
func BusStoredEvent(stream string, body []byte, ts int64) (Envelope, error) {
	e, err := NewEnvelope(&BusStored{Message: body})
	if err != nil {
		return e, err
	}
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = stream, stream, 1, ts, "bus"
	return e, nil
}

// BusStoredMessage returns the message a stream's events hold: the first event's,
// which must be a BusStored.
func BusStoredMessage(stream string, events []Envelope) ([]byte, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("messages: the log has no stream %s", stream)
	}
	p, err := events[0].Decode()
	if err != nil {
		return nil, err
	}
	s, ok := p.(*BusStored)
	if !ok {
		return nil, fmt.Errorf("%w: stream %s holds a %s, not a %s", ErrCorrupt, stream, events[0].Type, TypeBusStored)
	}
	return s.Message, nil
}
