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
// without its beginning).

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
	if w.calls == nil {
		w.calls = map[string]*deltaCall{}
	}
	for _, key := range keys {
		ct := m[key]
		c := &deltaCall{from: ct.from, seq: ct.seq, step: ct.step, attempt: ct.attempt}
		w.calls[key] = c
		if ct.seq == 0 {
			continue // no delta yet: they all come live
		}
		first := messages.ModelDelta{Key: key, Step: ct.step, Seq: ct.seq, Attempt: ct.attempt, Reset: true}
		if ct.over {
			// Too long to keep: the reader is told its text is not shown, and gets
			// the call's answer when it is recorded.
			c.any, c.lost, c.skip = true, true, true
			h.catchUpSend(sessionID, w, c, first, 0)
			continue
		}
		first.Content = ct.content.String()
		ds := []messages.ModelDelta{first}
		for _, tt := range ct.tools {
			ds = append(ds, messages.ModelDelta{Key: key, Step: ct.step, Seq: ct.seq, Attempt: ct.attempt,
				ToolCallIndex: tt.index, ToolCallID: tt.id, ToolName: tt.name, Arguments: tt.args.String()})
		}
		c.any, c.shown = true, ct.n
		for i, d := range ds {
			h.catchUpSend(sessionID, w, c, d, i)
		}
	}
}

// catchUpSend puts d, the i-th increment of a catch-up, into w's channel.
func (h *Hub) catchUpSend(sessionID string, w *watcher, c *deltaCall, d messages.ModelDelta, i int) {
	e := deltaEnvelope(sessionID, c.from, d)
	e.ID = d.Key + "/delta/catchup/" + strconv.FormatUint(d.Seq, 10) + "/" + strconv.Itoa(i)
	if !trySend(w, e) {
		c.lost = true
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
