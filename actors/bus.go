package actors

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// busMessage wraps encoded bytes as a bus message keyed by session ID.
func busMessage(id, sessionID string, typ messages.Type, payload []byte) *message.Message {
	m := message.NewMessage(id, payload)
	m.Metadata.Set(messages.MetaSessionID, sessionID)
	if typ != "" {
		m.Metadata.Set(messages.MetaType, string(typ))
	}
	return m
}
