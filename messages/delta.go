package messages

import (
	"fmt"
	"slices"
)

// TypeModelDelta is an increment of a model's answer as it streams (ModelDelta). It
// is live only: it travels from the node performing the model call to the watchers of
// the session (the node's stream API, node run), in a cluster in DeltaBatches on
// TopicDeltas, and is never appended to a session's log, never published on
// TopicEvents, never replayed. Its envelope has Seq 0.
const TypeModelDelta Type = "model.delta"

// ModelDelta is one increment of a streamed model answer, sent to a session's
// watchers while the call runs. Deltas are best effort: a slow watcher misses some,
// and the session's ModelResponded (recorded whole, once) is the answer; a reader
// shows the deltas of a call until its ModelResponded with the same Key arrives, then
// shows that instead.
type ModelDelta struct {
	// Key is the model call's idempotency key (ModelRequested.Key): it tells calls
	// apart, the parallel calls of one session too.
	Key string `json:"key"`
	// Step is the call's step (ModelRequested.Step).
	Step int `json:"step"`
	// Seq numbers the call's deltas from 1, across its attempts, in the order they
	// were produced.
	Seq uint64 `json:"seq"`
	// Attempt numbers the provider calls streamed for this model call from 1: a retry
	// of a stream cut mid-answer, or a fallback to another model, streams again from
	// the start under the next attempt.
	Attempt int `json:"attempt"`
	// Reset is set on the first delta of an attempt after the first: the text of the
	// earlier attempts belongs to no answer, and a reader discards it.
	Reset bool `json:"reset,omitempty"`
	// Content is the next piece of the answer's text.
	Content string `json:"content,omitempty"`
	// A tool-call increment: the call's position in the answer's ToolCalls, its ID and
	// name (usually with its first increment only) and the next piece of its JSON
	// arguments.
	ToolCallIndex int    `json:"tool_call_index,omitempty"`
	ToolCallID    string `json:"tool_call_id,omitempty"`
	ToolName      string `json:"tool_name,omitempty"`
	Arguments     string `json:"arguments,omitempty"`
}

// MessageType implements Payload.
func (*ModelDelta) MessageType() Type { return TypeModelDelta }

// TopicDeltas carries DeltaBatches, keyed by session ID: the increments of model
// calls of sessions watched on some node, from the node performing each call to the
// nodes serving the watchers. It is live only (read from the latest offset, in no
// consumer group, kept minutes) and apart from TopicEvents, so that event readers (the
// event sink, the hub's event feed, consumers of Troupe's events) never read deltas
// and a burst of them never delays an event.
const TopicDeltas = "troupe.deltas"

// TypeDeltaWatch marks (in MetaType) a DeltaWatch on TopicTasks.
const TypeDeltaWatch = "deltas.watch"

// TypeDeltaCatchUpAsk marks (in MetaType) a DeltaWatch on TopicDeltas: Node has a
// new watcher of the session's deltas, which came while a call may stream, and asks
// the nodes performing its calls for their text so far (TypeDeltaCatchUp).
const TypeDeltaCatchUpAsk = "deltas.catchup.ask"

// TypeDeltaCatchUp marks (in MetaType) a DeltaBatch on TopicDeltas that tells a call's
// text so far, in answer to a TypeDeltaCatchUpAsk: one delta with Reset (the text;
// none when no delta came yet, an empty one when the text was too long to keep),
// then one per tool call, all with the Seq of the last delta they stand for; End
// counts the deltas the text stands for (since the call's last one with Reset; -1:
// too long to keep). A node that follows the call already ignores it.
const TypeDeltaCatchUp = "deltas.catchup"

// DeltaBatch is the increments of one model call that the performing node had ready
// at once, in order: a few milliseconds' worth, so that a hundred tokens make a few
// bus messages, not a hundred. Node names the node that published it (a node does not
// deliver its own batches again: it handed their deltas to its watchers directly).
// The call's last batch, published before its answer, has End (and maybe no deltas).
type DeltaBatch struct {
	V         int          `json:"v"`
	SessionID string       `json:"session_id"`
	Node      string       `json:"node"`
	Deltas    []ModelDelta `json:"deltas"`
	End       *DeltaEnd    `json:"end,omitempty"`
}

// DeltaEnd ends the deltas of one performance of a model call: the call returned on
// the node that published it, and Sent is how many deltas it sent since the call's
// last one with Reset (that one included; all of them when none has it). A watcher's
// node that has fewer missed some (the bus or a full channel dropped them).
type DeltaEnd struct {
	Key  string `json:"key"`
	Sent int    `json:"sent"`
}

// DeltaWatch tells a session's owner, on TopicTasks (so it reaches the owner, after
// the tasks the same node published before it), that a node has a watcher of the
// session's deltas: for TTLMS milliseconds from its arrival, the owner has the
// session's model calls streamed onto TopicDeltas (EffectRequest.Stream). The
// watcher's node sends it again while the watcher stays, so that an owner that takes
// the session over learns it too.
type DeltaWatch struct {
	V         int    `json:"v"`
	SessionID string `json:"session_id"`
	Node      string `json:"node"`
	TTLMS     int64  `json:"ttl_ms"`
}

// TypeDeltaOwners marks (in MetaType) a DeltaOwners on TopicDeltas.
const TypeDeltaOwners = "deltas.owners"

// DeltaOwners tells the nodes that watch deltas (they read TopicDeltas) that Node
// took Partitions of TopicTasks (of Total) over: each sends the DeltaWatch of the
// sessions it watches there again at once, so that their new owner streams their
// calls from the first it makes, not from the watcher's next renewal.
type DeltaOwners struct {
	V          int    `json:"v"`
	Node       string `json:"node"`
	Partitions []int  `json:"partitions"`
	Total      int    `json:"total"`
}

func (b *DeltaBatch) stamp()  { b.V = CommandVersion }
func (w *DeltaWatch) stamp()  { w.V = CommandVersion }
func (o *DeltaOwners) stamp() { o.V = CommandVersion }

// DecodeDeltaOwners decodes and validates a DeltaOwners.
func DecodeDeltaOwners(b []byte) (DeltaOwners, error) {
	var o DeltaOwners
	if err := decodeCommand(b, &o, &o.V); err != nil {
		return o, err
	}
	if o.Total <= 0 || len(o.Partitions) == 0 || slices.ContainsFunc(o.Partitions, func(p int) bool { return p < 0 || p >= o.Total }) {
		return o, fmt.Errorf("%w: delta owners without partitions of %d", ErrCorrupt, o.Total)
	}
	return o, nil
}

// DecodeDeltaBatch decodes and validates a DeltaBatch.
func DecodeDeltaBatch(b []byte) (DeltaBatch, error) {
	var d DeltaBatch
	if err := decodeCommand(b, &d, &d.V); err != nil {
		return d, err
	}
	if d.SessionID == "" || len(d.Deltas) == 0 && d.End == nil {
		return d, fmt.Errorf("%w: delta batch without session_id or deltas", ErrCorrupt)
	}
	if d.End != nil {
		if k, err := ParseEffectKey(d.End.Key); err != nil || k.SessionID != d.SessionID || d.End.Sent < 0 {
			return d, fmt.Errorf("%w: delta batch for session %s: end %q/%d is not one of its calls'", ErrCorrupt, d.SessionID, d.End.Key, d.End.Sent)
		}
	}
	for _, x := range d.Deltas {
		k, err := ParseEffectKey(x.Key)
		if err != nil || k.SessionID != d.SessionID || x.Seq == 0 {
			return d, fmt.Errorf("%w: delta batch for session %s: delta %q/%d is not one of its calls'", ErrCorrupt, d.SessionID, x.Key, x.Seq)
		}
	}
	return d, nil
}

// DecodeDeltaWatch decodes and validates a DeltaWatch.
func DecodeDeltaWatch(b []byte) (DeltaWatch, error) {
	var w DeltaWatch
	if err := decodeCommand(b, &w, &w.V); err != nil {
		return w, err
	}
	if w.SessionID == "" || w.TTLMS <= 0 {
		return w, fmt.Errorf("%w: delta watch without session_id or ttl_ms", ErrCorrupt)
	}
	return w, nil
}
