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

// busMessage wraps encoded bytes as a bus message keyed by session ID.
func busMessage(id, sessionID string, typ messages.Type, payload []byte) *message.Message {
	m := message.NewMessage(id, payload)
	m.Metadata.Set(messages.MetaSessionID, sessionID)
	if typ != "" {
		m.Metadata.Set(messages.MetaType, string(typ))
	}
	return m
}
