package actors

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// TopicReaders is implemented by a SessionDeps.Publisher that can tell whether anybody
// reads a topic (the embedded bus, through the node's outbox): a session encodes and
// hands over nothing for a topic nobody reads. A Publisher that does not implement it
// gets every message.
type TopicReaders interface {
	// HasReaders reports whether topic has a subscriber now.
	HasReaders(topic string) bool
}

// hasReaders reports whether pub may have readers on topic.
func hasReaders(pub message.Publisher, topic string) bool {
	r, ok := pub.(TopicReaders)
	return !ok || r.HasReaders(topic)
}

// busMessage wraps encoded bytes as a bus message keyed by session ID, to be
// published. It is built without message.NewMessage's two acknowledgement
// channels, which only a message handed to a handler uses: a publisher acks
// nothing it is given (the embedded bus hands its subscribers copies, the Kafka
// publisher encodes it), and a session publishes nine of these per task. Ack and
// Nack work on it as on any message; its Acked and Nacked channels never fire.
func busMessage(id, sessionID string, typ messages.Type, payload []byte) *message.Message {
	md := make(message.Metadata, 2)
	md[messages.MetaSessionID] = sessionID
	if typ != "" {
		md[messages.MetaType] = string(typ)
	}
	return &message.Message{UUID: id, Metadata: md, Payload: payload}
}
