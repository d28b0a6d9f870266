package node

import (
	"strconv"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// deltaWatcherBuffer is the channel of a watcher of deltas (WatchDeltas): deltas come
// in bursts (a provider may send a hundred in a few milliseconds) and are dropped when
// it is full, so it holds a burst, and the events around it.
const deltaWatcherBuffer = 256

// WatchDeltas subscribes to a session's live events, as Watch does, and to the
// increments of its model answers as they stream: model.delta envelopes
// (messages.ModelDelta) between the session's events, each after the
// model.requested of its call and before its model.responded. Their envelopes have
// Seq 0: they are not events, are never in the log and are never read again, so a
// reader that resumes from the log (Watch's channel closed) gets no deltas for what
// it missed, and none for a call whose model.responded it has.
//
// A model call streams only when its session has a watcher of deltas as the call
// starts: a watcher that comes during a call gets deltas from the next one.
//
// Deltas are best effort. The node sends one only when the watcher's channel (256
// envelopes) has room and no event waits before it: a watcher that reads slowly misses deltas, never
// events (which wait in its backlog, as for Watch), and the session never waits for
// it. Only a session this node runs, whose model calls this node performs, has
// deltas; models that do not stream (offline, scripted without streaming) have none.
// Whatever was missed, the call's model.responded (recorded whole, once) carries the
// whole answer: a reader shows the deltas of a call (by Key; those after one with
// Reset replace the text before it) until its model.responded, then that.
//
// It is the subscription the node's own streams use (GET /v1/sessions/{id}/stream,
// node run) and the one for any other protocol that streams a session live (A2A
// message/stream): the channel closes when cancel is called, when the node closes, or
// when the watcher fell behind on events (read the log from the last seq seen, then
// watch again).
func (n *Node) WatchDeltas(sessionID string) (<-chan messages.Envelope, func()) {
	return n.hub.watch(sessionID, true)
}

// modelDeltas says where the increments of a model call for a session go
// (actors.LocalEffectsConfig.ModelDeltas): to its watchers that asked for deltas,
// when it has some as the call starts; with none, the call does not stream.
func (n *Node) modelDeltas(sessionID string) func(messages.ModelDelta) {
	if !n.hub.wantsDeltas(sessionID) {
		return nil
	}
	return func(d messages.ModelDelta) { n.hub.deliverDelta(sessionID, d) }
}

// wantsDeltas reports whether a local watcher of the session asked for deltas.
func (h *Hub) wantsDeltas(sessionID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.subs[sessionID] {
		if w.deltas && !w.remote && !w.gone {
			return true
		}
	}
	return false
}

// deliverDelta sends a model.delta envelope to the session's local watchers that
// asked for deltas, only where it goes straight into the watcher's channel: behind
// queued events it would overtake them, and queued it would push a slow watcher
// toward its disconnection, so it is dropped there. It never blocks.
func (h *Hub) deliverDelta(sessionID string, d messages.ModelDelta) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var e messages.Envelope
	for _, w := range h.subs[sessionID] {
		if !w.deltas || w.remote || w.feeding || w.gone {
			continue
		}
		if e.ID == "" {
			var err error
			if e, err = messages.NewEnvelope(&d); err != nil {
				return // a struct of strings and numbers: it cannot fail
			}
			e.ID = d.Key + "/delta/" + strconv.FormatUint(d.Seq, 10)
			e.SessionID, e.TS, e.Actor = sessionID, time.Now().UnixMicro(), "model"
		}
		select {
		case w.ch <- e:
		default: // a slow watcher: the delta is dropped, the events wait for it
		}
	}
}
