package node

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/troupe-run/troupe/messages"
)

// A watcher of deltas that comes while a model call streams (a client that
// reconnects mid-answer, a tasks/resubscribe, a second reader) gets the call's text
// so far at once, then its live deltas, with no gap and nothing twice: the hub keeps
// the text of each call that streams through it (callText), and a new watcher gets
// it as one increment with Reset (catchUp), put into its channel under the lock
// that orders the live deltas after it. The text kept is bounded (callTextMax): past
// it, a new watcher gets an empty increment with Reset, no more deltas of the call,
// and the call's model.responded, as a reader that missed deltas does.
//
// The hub keeps the text of the calls this node performs (from the first delta: the
// call registers when it starts, openCall) and of those it reads from the bus for a
// watcher that had the call from its start (a call it joined mid-way would be kept
// without its beginning). In a cluster, a node whose new watcher reads the bus and
// finds no text kept asks the nodes that stream the session's calls onto the bus
// for theirs (messages.TypeDeltaCatchUpAsk on troupe.deltas, which a node reads
// while it streams a call: clusterDeltas.begin); each answers, in order with its
// batches, with the text so far (messages.TypeDeltaCatchUp: deltaStream.catchUp),
// which the watchers that do not follow the call yet get (deliverCatchUp), the
// deltas it stands for that came before it dropped. The owner of a session that
// performs its calls starts to stream one that did not stream onto the bus (no
// node watched the session as it started) when a node announces a watcher
// (messages.DeltaWatch: watchedNow), its text so far first. A call a models node
// performs for another owner that did not stream onto the bus as it started has no
// text to ask for.

// callTextMax bounds the text (content and tool-call arguments) the hub keeps of one
// call for watchers that come later.
const callTextMax = 256 << 10

// callText is the text so far of a model call that streams through the hub: of its
// performance by node from ("": this one) since its last delta with Reset.
type callText struct {
	from          string
	step, attempt int
	seq           uint64 // the last delta's
	n             int    // the deltas since the last one with Reset (that one included)
	content       strings.Builder
	tools         []*toolText // in the order of their first delta
	size          int
	over          bool // past callTextMax: its text is dropped
}

// toolText is what the deltas of one tool call of a model call said so far.
type toolText struct {
	index    int
	id, name string
	args     strings.Builder
}

// openCall registers a model call this node performs on sessionID, so that its
// text is kept from its first delta on.
func (h *Hub) openCall(sessionID, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if h.streams == nil {
		h.streams = map[string]map[string]*callText{}
	}
	if h.streams[sessionID] == nil {
		h.streams[sessionID] = map[string]*callText{}
	}
	h.streams[sessionID][key] = &callText{}
}

// closeCall forgets the text of call key performed by node from, if it is the one
// kept. The caller holds h.mu.
func (h *Hub) closeCall(sessionID, key, from string) {
	m := h.streams[sessionID]
	if ct := m[key]; ct != nil && ct.from == from {
		delete(m, key)
		if len(m) == 0 {
			delete(h.streams, sessionID)
		}
	}
}

// forgetCall forgets the text of call key, whoever performs it: it was answered.
// The caller holds h.mu.
func (h *Hub) forgetCall(sessionID, key string) {
	if m := h.streams[sessionID]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(h.streams, sessionID)
		}
	}
}

// forgetRemoteCalls forgets the text of the session's calls read from the bus: the
// session has no watcher of deltas left here, so nothing reads them. The caller
// holds h.mu.
func (h *Hub) forgetRemoteCalls(sessionID string) {
	m := h.streams[sessionID]
	for key, ct := range m {
		if ct.from != "" {
			delete(m, key)
		}
	}
	if len(m) == 0 {
		delete(h.streams, sessionID)
	}
}

// record adds d, a delta of a call performed by node from, to the call's text: a
// call this node performs (registered by openCall), or one read from the bus whose
// text is kept already, or that a watcher here follows from its start (d is the
// first delta it gets), or that d starts again (Reset). Another performance of the
// call (another node, or numbered from 1 again) replaces the text kept. It is
// called once per delta, before the delta is offered to the watchers. The caller
// holds h.mu.
func (h *Hub) record(sessionID, from string, d messages.ModelDelta) {
	ct := h.streams[sessionID][d.Key]
	switch {
	case ct == nil:
		if from == "" || !d.Reset && !h.followedFromStart(sessionID, d.Key) {
			return
		}
		if h.streams == nil {
			h.streams = map[string]map[string]*callText{}
		}
		if h.streams[sessionID] == nil {
			h.streams[sessionID] = map[string]*callText{}
		}
		ct = &callText{from: from}
		h.streams[sessionID][d.Key] = ct
	case d.Reset || ct.from != from || ct.seq != 0 && d.Seq <= ct.seq:
		*ct = callText{from: from}
	}
	ct.step, ct.attempt, ct.seq = d.Step, d.Attempt, d.Seq
	ct.n++
	if ct.over {
		return
	}
	ct.size += len(d.Content) + len(d.Arguments) + len(d.ToolCallID) + len(d.ToolName)
	if ct.size > callTextMax {
		ct.over, ct.content, ct.tools = true, strings.Builder{}, nil
		return
	}
	ct.content.WriteString(d.Content)
	if d.Arguments == "" && d.ToolCallID == "" && d.ToolName == "" {
		return
	}
	var tt *toolText
	for _, x := range ct.tools {
		if x.index == d.ToolCallIndex {
			tt = x
		}
	}
	if tt == nil {
		tt = &toolText{index: d.ToolCallIndex}
		ct.tools = append(ct.tools, tt)
	}
	if d.ToolCallID != "" {
		tt.id = d.ToolCallID
	}
	if d.ToolName != "" {
		tt.name = d.ToolName
	}
	tt.args.WriteString(d.Arguments)
}

// followedFromStart reports whether a watcher of the session has call key open and
// got none of its deltas yet. The caller holds h.mu.
func (h *Hub) followedFromStart(sessionID, key string) bool {
	for _, w := range h.subs[sessionID] {
		if c := w.calls[key]; c != nil && !w.gone && c.seq == 0 && !c.any {
			return true
		}
	}
	return false
}

// catchUp hands w, a new watcher of deltas, the text so far of the session's calls
// that stream now, and opens them in w, so that their next deltas follow it. The
// caller holds h.mu; w's channel is empty.
func (h *Hub) catchUp(sessionID string, w *watcher) {
	m := h.streams[sessionID]
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(callSeqOf(a), callSeqOf(b)) })
	for _, key := range keys {
		ct := m[key]
		h.openCaughtUp(sessionID, w, key, ct, ct.text(key))
	}
}

// text is the catch-up of call key (messages.TypeDeltaCatchUp): no delta before
// the first, an empty one with Reset past callTextMax, else one with Reset and the
// text, then one per tool call.
func (ct *callText) text(key string) []messages.ModelDelta {
	if ct.seq == 0 {
		return nil
	}
	first := messages.ModelDelta{Key: key, Step: ct.step, Seq: ct.seq, Attempt: ct.attempt, Reset: true}
	if ct.over {
		return []messages.ModelDelta{first}
	}
	first.Content = ct.content.String()
	ds := []messages.ModelDelta{first}
	for _, tt := range ct.tools {
		ds = append(ds, messages.ModelDelta{Key: key, Step: ct.step, Seq: ct.seq, Attempt: ct.attempt,
			ToolCallIndex: tt.index, ToolCallID: tt.id, ToolName: tt.name, Arguments: tt.args.String()})
	}
	return ds
}

// textSoFar returns the catch-up of a call this node performs (callText.text) and
// the number of deltas it stands for (-1: past callTextMax), or false when the
// call is not streaming here.
func (h *Hub) textSoFar(sessionID, key string) ([]messages.ModelDelta, int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ct := h.streams[sessionID][key]
	if ct == nil || ct.from != "" {
		return nil, 0, false
	}
	if ct.over {
		return ct.text(key), -1, true
	}
	return ct.text(key), ct.n, true
}

// deliverCatchUp hands a call's text so far, from node from (a
// messages.TypeDeltaCatchUp standing for end.Sent deltas), to the session's watchers
// of deltas that do not follow the call yet (they came during it), or got its
// model.requested but none of its deltas (it did not stream onto the bus as it
// started: its performer heard of them later, watchedNow), and keeps it for those
// that come next.
func (h *Hub) deliverCatchUp(sessionID, from string, ds []messages.ModelDelta, end messages.DeltaEnd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := end.Key
	ct := &callText{from: from, n: max(end.Sent, 0), over: end.Sent < 0}
	if len(ds) > 0 {
		ct.step, ct.attempt, ct.seq = ds[0].Step, ds[0].Attempt, ds[0].Seq
		ct.content.WriteString(ds[0].Content)
		for _, d := range ds[1:] {
			tt := &toolText{index: d.ToolCallIndex, id: d.ToolCallID, name: d.ToolName}
			tt.args.WriteString(d.Arguments)
			ct.tools = append(ct.tools, tt)
		}
	}
	waiting := false
	for _, w := range h.subs[sessionID] {
		if c := w.calls[key]; !w.deltas || w.gone || c != nil && (c.seq != 0 || c.any) || slices.Contains(w.answered, key) {
			continue // it follows the call, or has its answer
		}
		waiting = true
		h.openCaughtUp(sessionID, w, key, ct, ds)
		h.releaseWaiting(sessionID, w, callSeqOf(key))
	}
	if old := h.streams[sessionID][key]; waiting && (old == nil || old.from != from || old.seq < ct.seq) {
		if h.streams == nil {
			h.streams = map[string]map[string]*callText{}
		}
		if h.streams[sessionID] == nil {
			h.streams[sessionID] = map[string]*callText{}
		}
		h.streams[sessionID][key] = ct
	}
}

// openCaughtUp opens call key in w as ct tells it and hands w ds, its text so far
// (callText.text). The caller holds h.mu.
func (h *Hub) openCaughtUp(sessionID string, w *watcher, key string, ct *callText, ds []messages.ModelDelta) {
	if w.calls == nil {
		w.calls = map[string]*deltaCall{}
	}
	c := &deltaCall{from: ct.from, seq: ct.seq, step: ct.step, attempt: ct.attempt, caughtUp: ct.seq}
	w.calls[key] = c
	if len(ds) == 0 {
		return // no delta yet: they all come live
	}
	c.any = true
	if ct.over || w.feeding {
		// Too long to keep, or behind the events queued: the reader is told its
		// text is not shown, and gets the call's answer when it is recorded.
		c.lost, c.skip = true, true
		d := ds[0]
		d.Content = ""
		ds = []messages.ModelDelta{d}
	} else {
		c.shown = ct.n
	}
	for i, d := range ds {
		e := deltaEnvelope(sessionID, c.from, d)
		e.ID = d.Key + "/delta/catchup/" + strconv.FormatUint(d.Seq, 10) + "/" + strconv.Itoa(i)
		if w.feeding || !trySend(w, e) {
			c.lost, c.skip = true, true
			return
		}
	}
}

// callSeqOf is the seq of a call's key (0 when it is not one).
func callSeqOf(key string) uint64 {
	k, err := messages.ParseEffectKey(key)
	if err != nil {
		return 0
	}
	return k.Seq
}
