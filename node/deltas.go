package node

import (
	"slices"
	"strconv"
	"strings"
	"sync"
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
// The node streams every model call of the sessions it runs (modelDeltas), watched
// or not, keeping each call's text so far while it runs. A watcher that comes while
// a call streams (a client that opens the stream mid-answer, or reconnects) first
// gets the call's text so far, as one delta with Reset, then its next deltas
// (deltas_catchup.go): from this node when it performs the call or another watcher
// here followed it from its start, else from the node performing it, over the bus:
// the owner performing its session's call starts to stream it onto the bus when it
// hears of the watcher (watchedNow); a models node performing it for another owner
// streams it only when the request asked (another node watched as it started), and
// otherwise its answer comes whole.
//
// In a cluster (Bus) the watcher may be on any node: the session's owner, another
// node that serves the API, or `node run --kafka`. A watcher on a node other than the
// owner is announced to it (messages.DeltaWatch on troupe.tasks, after the tasks this
// node published before it, and again every few seconds while it stays), and the
// owner then marks the session's model requests to stream (EffectRequest.Stream).
// The node performing a call (the owner, or a node with the models role) hands its
// increments to its own watchers and, for the others, publishes them on
// troupe.deltas, deltaLinger's worth (25 ms) in one message (messages.DeltaBatch);
// each node with watchers of deltas reads that topic while it has them, and holds
// each delta until its call's model.requested reached the watcher through the
// events, or drops it once the call's model.responded did. A call performed again
// by another node (its first performer died) starts over with a Reset delta.
//
// A call's last batch carries the end of its deltas (messages.DeltaEnd: how many
// the performing node sent since the last Reset), published before its answer. The
// answer travels on another topic and may reach the watcher's node first: there the
// model.responded (and the session's events after it) waits in the watcher's
// stream until the call's end came, deltaTailWait (1 s) at most, so that the tail
// of a burst comes before the answer. When the watcher was shown fewer deltas than
// the end counts (the bus or a full channel dropped some), or the end never came,
// an empty delta with Reset comes just before the answer: the text shown is no
// answer, the model.responded is. A call that did not stream onto the bus (no node
// watched as it started) has its owner publish its end, none sent, when another node
// watches by the time it is answered (streamingRequests), so that a watcher that
// got its model.requested does not wait. An owner that takes a session over (a rebalance)
// says so on troupe.deltas (messages.DeltaOwners), and the watchers' nodes announce
// them again at once (takenOver).
//
// Deltas are best effort. The node sends one only when the watcher's channel (256
// envelopes) has room and no event waits before it: a watcher that reads slowly
// misses deltas, never events (which wait in its backlog, as for Watch), and the
// session never waits for it, nor for the bus (a performing node holds at most
// deltaHeldMax deltas for the bus, and drops more). Models that do not stream
// (offline, scripted without streaming) have none. Whatever was missed, the call's
// model.responded (recorded whole, once) carries the whole answer: a reader shows the
// deltas of a call (by Key; those after one with Reset replace the text before it)
// until its model.responded, then that.
//
// It is the subscription the node's own streams use (GET /v1/sessions/{id}/stream,
// node run) and the one for any other protocol that streams a session live (A2A
// message/stream): the channel closes when cancel is called, when the node closes, or
// when the watcher fell behind on events (read the log from the last seq seen, then
// watch again).
func (n *Node) WatchDeltas(sessionID string) (<-chan messages.Envelope, func()) {
	return n.hub.watch(sessionID, true)
}

// modelDeltas says where the increments of a model call go
// (actors.LocalEffectsConfig.ModelDeltas), redacted (deltaRedactor): to the
// session's watchers on this node, and onto the bus (clusterDeltas.stream) when the
// request asks it to stream (its owner is another node that knows of a watcher) or
// this node owns the session and other nodes watch it.
//
// A call of a session this node runs streams even when nobody watches it as it
// starts: its text so far is kept while it runs (openCall, at most callTextMax), so
// that a watcher that comes during it, here or (through the DeltaWatch that
// announces it) on another node, gets that text and the deltas after it
// (deltas_catchup.go) rather than silence until the answer. A call this node
// performs for another node's session streams only as the request asks
// (EffectRequest.Stream): no watcher can come here for it, and the session's owner
// cannot reach its performer mid-call. Without Config.StreamUnwatched, a call
// streams only for the watchers there are as it starts.
func (n *Node) modelDeltas(req messages.EffectRequest) (func(messages.ModelDelta), func()) {
	sid := req.SessionID
	c := n.hub.cluster
	onBus := c != nil && (req.Stream || c.leases.watched(sid))
	runsHere := n.cfg.StreamUnwatched && (c == nil || n.hub.isLocal == nil || n.hub.isLocal(sid))
	if !onBus && !runsHere && !n.hub.wantsDeltas(sid) {
		return nil, nil
	}
	key := req.Key.String()
	var out *deltaStream
	if c != nil {
		out = c.stream(sid)
		out.key, out.hub, out.bus = key, n.hub, onBus
	}
	red := &deltaRedactor{r: n.redactor}
	n.hub.openCall(sid, key) // its text is kept for the watchers that come during it
	if out != nil {
		c.begin(out)
	}
	var mu sync.Mutex
	sent := 0 // deltas handed on since the last one with Reset (messages.DeltaEnd)
	to := func(d messages.ModelDelta) {
		d, ok := red.pass(d)
		if !ok {
			return
		}
		mu.Lock()
		if d.Reset {
			sent = 0
		}
		sent++
		mu.Unlock()
		n.hub.deliverDeltas(sid, "", d)
		if out != nil {
			out.add(d)
		}
	}
	// Once the call returned, before its answer goes anywhere: the end of its
	// deltas, for the watchers here and, after the last batch, on the bus when the
	// call streams onto it (from its start, or since another node's watcher came).
	done := func() {
		mu.Lock()
		end := messages.DeltaEnd{Key: key, Sent: sent}
		mu.Unlock()
		onBus := out != nil && out.finish()
		n.hub.endDeltas(sid, "", end)
		if out != nil {
			if onBus {
				out.done(end)
			}
			c.end(out)
		}
	}
	return to, done
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
// and the part after, held. A last word that follows "Bearer" is held with it: the
// bearer token shape (redact) is the two words together.
func (x *deltaRedactor) words(s string) (out, held string) {
	i := strings.LastIndexAny(s, " \t\n\r")
	if i >= 0 {
		if before := strings.TrimRight(s[:i], " \t\n\r"); len(before) >= len("bearer") &&
			strings.EqualFold(before[len(before)-len("bearer"):], "bearer") {
			i = strings.LastIndexAny(before, " \t\n\r")
		}
	}
	if i < 0 && len(s) <= maxHeld {
		return "", s
	}
	if i < 0 || len(s)-i-1 > maxHeld {
		i = len(s) - 1
	}
	return x.r.String(s[:i+1]), s[i+1:]
}

// wantsDeltas reports whether a watcher of the session on this node asked for deltas.
func (h *Hub) wantsDeltas(sessionID string) bool {
	if h.deltaWatchers.Load() == 0 {
		// No watcher of deltas anywhere. One that comes after this read misses
		// the call's deltas as one coming after the lookup under mu would.
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.subs[sessionID] {
		if w.deltas && !w.gone {
			return true
		}
	}
	return false
}

// deltaCall is a model call whose model.requested a watcher has, and not its
// model.responded: the node that sent its last delta ("": this one), that delta's
// Seq, Step and Attempt, and what the watcher was shown of the performance it
// follows.
type deltaCall struct {
	from          string
	seq           uint64
	step, attempt int
	// shown counts the deltas put into the watcher's channel since the last one
	// with Reset it got (that one included); lost is set when one since then did
	// not get there; any when the watcher got some delta of the call.
	shown     int
	lost, any bool
	// end is the end of the performance followed (messages.DeltaEnd), once it came.
	end *messages.DeltaEnd
	// skip: the watcher came during the call, whose text was too long to keep
	// (catchUp): its deltas are not shown until another attempt starts over.
	skip bool
	// caughtUp is the Seq of the last delta the text a watcher got when it came
	// during the call stands for (catchUp): the deltas up to it from the same node
	// are not shown again.
	caughtUp uint64
}

// incomplete reports whether the text a watcher was shown of the call lacks
// deltas: some were dropped (on the bus, before their call's model.requested, or
// at a full channel), or their end never came. The watcher then gets an empty delta
// with Reset before the call's model.responded (answer).
func (c *deltaCall) incomplete() bool {
	return c.any && (c.lost || c.end == nil || c.end.Sent != c.shown)
}

// deltaHold is a model.responded that waits, in a watcher's stream, for the last
// deltas of its call, and the session's events after it.
type deltaHold struct {
	key    string              // the call's
	events []messages.Envelope // its model.responded, then the events after it
	timer  *time.Timer         // deltaTailWait: the end of the wait
}

// deltaTailWait bounds how long a watcher's stream holds a model.responded for
// its call's last deltas (messages.DeltaEnd): the performing node publishes them
// before the answer, but on another topic, and each topic's reader lags as it
// does; only an end the bus lost (or a performer that died) makes it wait this long.
const deltaTailWait = time.Second

// waitingDelta is a delta (or, with end, the end of a call's deltas) that came
// before its call's model.requested reached the watcher (the events of a session
// another node runs come later than the deltas of the node performing its calls).
type waitingDelta struct {
	d       messages.ModelDelta
	end     *messages.DeltaEnd
	from    string
	callSeq uint64 // the seq of the call's model.requested (its key's)
}

// deltaWaitingMax bounds the deltas a watcher holds waiting for their call's
// model.requested; more are dropped.
const deltaWaitingMax = 256

// deliverDeltas hands a session's deltas, in order, to its watchers of deltas: from
// a model call this node performs (from ""), or read from the bus, sent by node from.
// A watcher gets a delta only after its call's model.requested (until then it waits,
// up to deltaWaitingMax) and before its model.responded (then it is dropped), and
// only where it goes straight into the watcher's channel: behind queued events it
// would overtake them, and queued it would push a slow watcher toward its
// disconnection, so it is dropped there. It never blocks.
func (h *Hub) deliverDeltas(sessionID, from string, ds ...messages.ModelDelta) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range ds {
		h.record(sessionID, from, d)
		for _, w := range h.subs[sessionID] {
			if w.deltas && !w.gone {
				h.offerDelta(sessionID, w, d, from)
			}
		}
	}
}

// endDeltas tells a session's watchers of deltas that a performance of a model call
// ended on node from ("": this one): a model.responded of the call held for it
// (offerAmongDeltas) goes on now, behind the deltas before the end.
func (h *Hub) endDeltas(sessionID, from string, end messages.DeltaEnd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closeCall(sessionID, end.Key, from)
	var behind []*watcher
	for _, w := range h.subs[sessionID] {
		if w.deltas && !w.gone && !h.offerEnd(sessionID, w, end, from) {
			behind = append(behind, w)
		}
	}
	for _, w := range behind {
		h.drop(sessionID, w)
	}
}

// offerEnd records end in w's call, releasing the model.responded held for it; it
// waits with the deltas when the call's model.requested did not reach w yet. It
// reports false when w fell behind. The caller holds h.mu.
func (h *Hub) offerEnd(sessionID string, w *watcher, end messages.DeltaEnd, from string) bool {
	c := w.calls[end.Key]
	if c == nil {
		key, err := messages.ParseEffectKey(end.Key)
		if err == nil && key.Seq > w.seen && len(w.waiting) < deltaWaitingMax {
			w.waiting = append(w.waiting, waitingDelta{end: &end, from: from, callSeq: key.Seq})
		}
		return true
	}
	if c.seq != 0 && from != c.from {
		if end.Sent == 0 && c.end == nil && w.hold != nil && w.hold.key == end.Key {
			// No delta will come (the session's owner says the call did not stream
			// to the bus): the answer goes on, after a reset.
			return h.release(sessionID, w)
		}
		return true // a performance whose deltas the watcher is not shown
	}
	if c.end != nil && end.Sent == 0 {
		return true // the owner's end of a call that streamed after all (streamingRequests)
	}
	c.end = &end
	if w.hold != nil && w.hold.key == end.Key {
		return h.release(sessionID, w)
	}
	return true
}

// offerDelta hands d to w, holds it until its call's model.requested, or drops it.
// The caller holds h.mu.
func (h *Hub) offerDelta(sessionID string, w *watcher, d messages.ModelDelta, from string) {
	c := w.calls[d.Key]
	if c == nil {
		key, err := messages.ParseEffectKey(d.Key)
		if err != nil || key.Seq <= w.seen || len(w.waiting) >= deltaWaitingMax {
			return // answered, or requested before the watcher came: no place for it
		}
		w.waiting = append(w.waiting, waitingDelta{d: d, from: from, callSeq: key.Seq})
		return
	}
	if from == c.from && d.Seq <= c.caughtUp {
		return // in the text the watcher got as it came
	}
	if c.seq != 0 && (from != c.from || d.Seq <= c.seq) {
		// Another performance of the call (its first performer died; the call was
		// issued again): what the watcher was shown belongs to no answer.
		d.Reset, c.end = true, nil
	}
	if c.skip {
		if !d.Reset {
			c.seq = d.Seq
			return // its text is not shown (catchUp)
		}
		c.skip = false
	}
	c.from, c.seq, c.step, c.attempt = from, d.Seq, d.Step, d.Attempt
	delivered := !w.feeding && trySend(w, deltaEnvelope(sessionID, from, d))
	switch {
	case !delivered: // a slow watcher: the delta is dropped, the events wait for it
		c.lost = true
	case d.Reset:
		c.shown, c.lost, c.any = 1, false, true
	default:
		c.shown++
		c.any = true
	}
}

// answeredKept is how many of the calls last answered a watcher of deltas
// remembers: a call's text so far read from the bus after its answer
// (deliverCatchUp) is not shown.
const answeredKept = 8

// releaseWaiting offers w the deltas (and ends) that waited for call callSeq to
// open. The caller holds h.mu.
func (h *Hub) releaseWaiting(sessionID string, w *watcher, callSeq uint64) {
	if len(w.waiting) == 0 {
		return
	}
	var ready []waitingDelta
	w.waiting = slices.DeleteFunc(w.waiting, func(x waitingDelta) bool {
		if x.callSeq == callSeq {
			ready = append(ready, x)
			return true
		}
		return false
	})
	for _, x := range ready {
		if x.end != nil {
			h.offerEnd(sessionID, w, *x.end, x.from) // no model.responded of the call is held yet
		} else {
			h.offerDelta(sessionID, w, x.d, x.from)
		}
	}
}

// trySend puts e into w's channel if it has room. The caller holds h.mu.
func trySend(w *watcher, e messages.Envelope) bool {
	select {
	case w.ch <- e:
		return true
	default:
		return false
	}
}

// deltaEnvelope is the envelope of d, a delta of sessionID's from node from.
func deltaEnvelope(sessionID, from string, d messages.ModelDelta) messages.Envelope {
	e, err := messages.NewEnvelope(&d)
	if err != nil {
		return e // a struct of strings and numbers: it cannot fail
	}
	e.ID = d.Key + "/delta/" + strconv.FormatUint(d.Seq, 10)
	if from != "" { // unique across the performances of the call
		e.ID = d.Key + "/delta/" + from + "/" + strconv.FormatUint(d.Seq, 10)
	}
	e.SessionID, e.TS, e.Actor = sessionID, time.Now().UnixMicro(), "model"
	return e
}

// offerAmongDeltas hands e to w, a watcher of deltas, in the order of the deltas it
// gets: a model.responded whose call's deltas may come over the bus (w.busDeltas)
// waits until their end came (offerEnd), or deltaTailWait passed; the events after
// it wait behind it, up to watcherBacklog (then it goes on at once). It reports
// false when w fell behind. The caller holds h.mu.
func (h *Hub) offerAmongDeltas(sessionID string, w *watcher, e messages.Envelope) bool {
	if w.hold != nil {
		if len(w.hold.events) < watcherBacklog {
			w.hold.events = append(w.hold.events, e)
			return true
		}
		if !h.release(sessionID, w) {
			return false
		}
		return h.offerAmongDeltas(sessionID, w, e) // a hold the release began has room
	}
	if e.Type != messages.TypeModelResponded {
		return h.send(sessionID, w, e)
	}
	if c := w.calls[e.CausationID]; c != nil && c.end == nil && w.busDeltas {
		hold := &deltaHold{key: e.CausationID, events: []messages.Envelope{e}}
		w.hold = hold
		hold.timer = time.AfterFunc(deltaTailWait, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if w.hold != hold || w.gone {
				return
			}
			h.tailTimeouts.Add(1)
			if !h.release(sessionID, w) {
				h.drop(sessionID, w)
			}
		})
		return true
	}
	return h.answer(sessionID, w, e)
}

// release hands w the model.responded it holds, and offers the events held behind
// it again (a later one may be held in turn). It reports false when w fell behind.
// The caller holds h.mu.
func (h *Hub) release(sessionID string, w *watcher) bool {
	hold := w.hold
	w.hold = nil
	hold.timer.Stop()
	if !h.answer(sessionID, w, hold.events[0]) {
		return false
	}
	for _, e := range hold.events[1:] {
		if !h.offerAmongDeltas(sessionID, w, e) {
			return false
		}
	}
	return true
}

// answer hands w a model.responded e; when the text w was shown of its call is
// incomplete, an empty delta with Reset comes first, so that a reader that renders
// the deltas drops their text for the answer rather than show a gap. The caller
// holds h.mu.
func (h *Hub) answer(sessionID string, w *watcher, e messages.Envelope) bool {
	if c := w.calls[e.CausationID]; c != nil && c.incomplete() {
		d := messages.ModelDelta{Key: e.CausationID, Step: c.step, Seq: c.seq + 1, Attempt: c.attempt, Reset: true}
		r := deltaEnvelope(sessionID, "", d)
		r.ID = d.Key + "/delta/incomplete"
		if !h.send(sessionID, w, r) {
			return false
		}
	}
	return h.send(sessionID, w, e)
}

// track follows the model calls of the events handed to a watcher of deltas: a
// model.requested opens its call (and lets the deltas waiting for it through), a
// model.responded closes it. The caller holds h.mu.
func (h *Hub) track(sessionID string, w *watcher, e messages.Envelope) {
	if e.Seq > w.seen {
		w.seen = e.Seq
	}
	switch e.Type {
	case messages.TypeModelRequested:
		key := messages.EffectKey{SessionID: sessionID, Seq: e.Seq}.String()
		if w.calls == nil {
			w.calls = map[string]*deltaCall{}
		}
		if w.calls[key] == nil { // else opened when the watcher came (catchUp)
			w.calls[key] = &deltaCall{}
		}
		h.releaseWaiting(sessionID, w, e.Seq)
	case messages.TypeModelResponded:
		delete(w.calls, e.CausationID)
		if len(w.answered) == answeredKept {
			w.answered = append(w.answered[:0], w.answered[1:]...)
		}
		w.answered = append(w.answered, e.CausationID)
	}
	// Deltas of calls requested before this event whose model.requested the watcher
	// did not get (it came later) have no place any more.
	if len(w.waiting) > 0 {
		w.waiting = slices.DeleteFunc(w.waiting, func(x waitingDelta) bool { return x.callSeq <= w.seen })
	}
}
