package node

import (
	"strconv"
	"strings"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/redact"
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
// redacted (deltaRedactor), when it has some as the call starts; with none, the call
// does not stream.
func (n *Node) modelDeltas(sessionID string) func(messages.ModelDelta) {
	if !n.hub.wantsDeltas(sessionID) {
		return nil
	}
	red := &deltaRedactor{r: n.redactor}
	return func(d messages.ModelDelta) {
		if d, ok := red.pass(d); ok {
			n.hub.deliverDelta(sessionID, d)
		}
	}
}

// maxHeld bounds the text a deltaRedactor holds back waiting for the end of a word.
const maxHeld = 4 << 10

// deltaRedactor keeps secrets out of one model call's deltas, as the session's
// redactor keeps them out of its events: a secret split over several increments
// would pass a redactor that saw them one at a time, so text is held back to the
// end of its last word (secrets have no white space) and redacted a run of whole
// words at a time. The last word of an answer comes with its model.responded only;
// a word longer than maxHeld is let through in pieces.
type deltaRedactor struct {
	r    *redact.Redactor
	text string         // the content held back
	args map[int]string // the arguments held back, by tool call
}

// pass returns d redacted, with the text it can let through now, and false when it
// has nothing to send yet.
func (x *deltaRedactor) pass(d messages.ModelDelta) (messages.ModelDelta, bool) {
	if d.Reset { // the text held belongs to no answer
		x.text, x.args = "", nil
	}
	d.Content, x.text = x.words(x.text + d.Content)
	if d.Arguments != "" || x.args[d.ToolCallIndex] != "" {
		if x.args == nil {
			x.args = map[int]string{}
		}
		d.Arguments, x.args[d.ToolCallIndex] = x.words(x.args[d.ToolCallIndex] + d.Arguments)
	}
	return d, d.Reset || d.Content != "" || d.Arguments != "" || d.ToolCallID != "" || d.ToolName != ""
}

// words splits s after its last white space, and returns the part before, redacted,
// and the part after, held.
func (x *deltaRedactor) words(s string) (out, held string) {
	i := strings.LastIndexAny(s, " \t\n\r")
	if i < 0 && len(s) <= maxHeld {
		return "", s
	}
	if i < 0 || len(s)-i-1 > maxHeld {
		i = len(s) - 1
	}
	return x.r.String(s[:i+1]), s[i+1:]
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
