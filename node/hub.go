package node

import (
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/messages"
)

// Hub fans a session's live events out to its watchers. On an embedded node the
// session actors hand it their events as soon as they are durable (deliver); on a
// shared bus it reads them from messages.TopicEvents (handle), as the sessions may run
// on other nodes.
//
// Delivery never blocks a session actor. Each watcher has a small channel and, behind
// it, a backlog that a goroutine of its own feeds into the channel while there is
// one; a watcher whose backlog passes watcherBacklog has fallen behind and is
// disconnected (its channel closes): it resumes from the event log, which has every
// event.
type Hub struct {
	mu     sync.Mutex
	subs   map[string][]*watcher // by session; most have one
	closed bool
}

const (
	// watcherBuffer is the channel of a watcher: most watchers read as fast as a
	// session writes, so a small one does (an event is about 150 bytes).
	watcherBuffer = 8
	// watcherBacklog bounds the events queued behind a watcher's channel.
	watcherBacklog = 256
)

// watcher is one Watch. Its fields are guarded by Hub.mu.
type watcher struct {
	ch      chan messages.Envelope
	backlog []messages.Envelope
	feeding bool          // a goroutine feeds backlog into ch
	gone    bool          // disconnected: ch is closed, or is once the feeder returns
	stop    chan struct{} // closed when gone, to stop the feeder
}

func newHub() *Hub { return &Hub{subs: map[string][]*watcher{}} }

// handle delivers an event read from the bus.
func (h *Hub) handle(msg *message.Message) error {
	sid := msg.Metadata.Get(messages.MetaSessionID)
	h.mu.Lock()
	watched := len(h.subs[sid]) > 0
	h.mu.Unlock()
	if !watched {
		return nil
	}
	e, err := messages.Unmarshal(msg.Payload)
	if err != nil {
		return nil // the log holds the event; a bad bus copy is not worth a retry
	}
	h.deliver(sid, []messages.Envelope{e})
	return nil
}

// deliver hands a session's events, in order, to its watchers.
func (h *Hub) deliver(sessionID string, events []messages.Envelope) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var behind []*watcher // rare: dropped once the loop is done with the slice
	for _, w := range h.subs[sessionID] {
		for _, e := range events {
			if w.feeding {
				if len(w.backlog) >= watcherBacklog {
					behind = append(behind, w)
					break
				}
				w.backlog = append(w.backlog, e)
				continue
			}
			select {
			case w.ch <- e:
			default:
				w.backlog = append(w.backlog, e)
				w.feeding = true
				go h.feed(w)
			}
		}
	}
	for _, w := range behind {
		h.drop(sessionID, w)
	}
}

// feed moves w's backlog into its channel, in order, until the backlog is empty or
// w is gone.
func (h *Hub) feed(w *watcher) {
	for {
		h.mu.Lock()
		if w.gone || len(w.backlog) == 0 {
			w.feeding = false
			if w.gone {
				close(w.ch)
			}
			w.backlog = nil
			h.mu.Unlock()
			return
		}
		e := w.backlog[0]
		w.backlog[0] = messages.Envelope{}
		w.backlog = w.backlog[1:]
		h.mu.Unlock()
		select {
		case w.ch <- e:
		case <-w.stop:
		}
	}
}

// drop disconnects w. The caller holds h.mu.
func (h *Hub) drop(sessionID string, w *watcher) {
	if w.gone {
		return
	}
	w.gone = true
	close(w.stop)
	if !w.feeding {
		close(w.ch)
	}
	set := slices.DeleteFunc(h.subs[sessionID], func(x *watcher) bool { return x == w })
	if len(set) == 0 {
		delete(h.subs, sessionID)
	} else {
		h.subs[sessionID] = set
	}
}

func (h *Hub) subscribe(sessionID string) (<-chan messages.Envelope, func()) {
	w := &watcher{ch: make(chan messages.Envelope, watcherBuffer), stop: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(w.ch)
		return w.ch, func() {}
	}
	h.subs[sessionID] = append(h.subs[sessionID], w)
	return w.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.drop(sessionID, w)
	}
}

func (h *Hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sid, set := range h.subs {
		for _, w := range slices.Clone(set) {
			h.drop(sid, w)
		}
	}
}

func (h *Hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}
