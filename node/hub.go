package node

import (
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// Hub fans the bus's live events out to watchers of one session. A watcher that falls
// behind is disconnected (its channel closes) instead of slowing the session actors:
// it resumes from the event log, which has every event.
type Hub struct {
	mu     sync.Mutex
	subs   map[string]map[chan messages.Envelope]struct{}
	closed bool
}

const watcherBuffer = 256

func newHub() *Hub { return &Hub{subs: map[string]map[chan messages.Envelope]struct{}{}} }

func (h *Hub) handle(msg *message.Message) error {
	sid := msg.Metadata.Get(messages.MetaSessionID)
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[sid]
	if len(set) == 0 {
		return nil
	}
	e, err := messages.Unmarshal(msg.Payload)
	if err != nil {
		return nil // the log holds the event; a bad bus copy is not worth a retry
	}
	for ch := range set {
		select {
		case ch <- e:
		default:
			delete(set, ch)
			close(ch)
		}
	}
	return nil
}

func (h *Hub) subscribe(sessionID string) (<-chan messages.Envelope, func()) {
	ch := make(chan messages.Envelope, watcherBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	if h.subs[sessionID] == nil {
		h.subs[sessionID] = map[chan messages.Envelope]struct{}{}
	}
	h.subs[sessionID][ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if set := h.subs[sessionID]; set != nil {
			if _, ok := set[ch]; ok {
				delete(set, ch)
				close(ch)
			}
			if len(set) == 0 {
				delete(h.subs, sessionID)
			}
		}
	}
}

func (h *Hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sid, set := range h.subs {
		for ch := range set {
			close(ch)
		}
		delete(h.subs, sid)
	}
}

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}
