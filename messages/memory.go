package messages

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// The events of a memory namespace (package memory). A namespace ("user:alice",
// "agent:planner") is an event-sourced entity like a session: its changes are
// appended to a stream of its own, "memory/<namespace>" (not a session: no task runs
// there), and its memories, vector index, keyword index, entity graph and core blocks
// are the fold of that stream. Every change carries the Reason it was made and, where
// it has them, the Sources it came from, so that "where did this memory come from, why
// was it changed or forgotten" has an answer in the log.
//
// Key is the idempotency key of the operation that made the change (a tool call's
// effect key, an HTTP request's key, a consolidation run's key), empty for a change
// made without one: a change whose key is already in the stream is not made again.

// MemoryRecord is a memory as it stands after an event: the whole record, so a fold
// never needs an earlier event to know it.
type MemoryRecord struct {
	MemoryID string `json:"memory_id"`
	// Tier is working, episodic, semantic or perceptual.
	Tier string `json:"tier"`
	// Modality is text (the default when empty), image or audio.
	Modality string `json:"modality,omitempty"`
	Content  string `json:"content"`
	// URI locates the media a perceptual memory describes (a path or URL), if any.
	URI        string  `json:"uri,omitempty"`
	Importance float64 `json:"importance"`
	// AtUS is when the remembered thing happened (Unix microseconds): the time the
	// recency and decay formulas age from.
	AtUS int64 `json:"at_us"`
	// Hash is the hex SHA-256 of the normalised content: exact duplicates share it.
	Hash string `json:"hash"`
	// Vector is the content's embedding as it was computed when the change was made,
	// so that a fold or a replay rebuilds the vector index without calling the
	// embedder again. Model names the embedder.
	Vector   Vector `json:"vector,omitempty"`
	Embedder string `json:"embedder,omitempty"`
	// Metadata is the caller's JSON object, kept through updates and merges.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Participants and Outcome describe an episode (episodic tier).
	Participants []string `json:"participants,omitempty"`
	Outcome      string   `json:"outcome,omitempty"`
	// Entities and Relations are what was extracted on write (semantic tier): the
	// entity graph is their fold.
	Entities  []string         `json:"entities,omitempty"`
	Relations []MemoryRelation `json:"relations,omitempty"`
	// Sources is the memory's provenance: every source it came from, merges included.
	Sources []MemorySource `json:"sources,omitempty"`
}

// MemoryRelation is one edge of the entity graph: From -Type-> To.
type MemoryRelation struct {
	From string `json:"from"`
	Type string `json:"type"`
	To   string `json:"to"`
}

// MemorySource says where a memory came from: a session's event (Kind "session",
// ID the session, Seq the event), another memory (Kind "memory": merged, promoted or
// distilled from it), an HTTP request, an import file, or the consolidator.
type MemorySource struct {
	Kind string `json:"kind"`
	ID   string `json:"id,omitempty"`
	Seq  uint64 `json:"seq,omitempty"`
	// Detail is free text: the file and line of an import, the metadata of a merged
	// memory, the caller's note.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// MemoryAdded records a new memory.
type MemoryAdded struct {
	Key    string       `json:"key,omitempty"`
	Reason string       `json:"reason"`
	Memory MemoryRecord `json:"memory"`
}

// MemoryUpdated records a change to a memory: Memory is the whole record after it.
type MemoryUpdated struct {
	Key    string       `json:"key,omitempty"`
	Reason string       `json:"reason"`
	Memory MemoryRecord `json:"memory"`
}

// MemoryMerged records that the memories Merged were folded into Memory (the one
// kept, its record after the merge: every source and metadata of the merged ones
// kept); the merged ones are gone from every projection.
type MemoryMerged struct {
	Key    string       `json:"key,omitempty"`
	Reason string       `json:"reason"`
	Merged []string     `json:"merged"`
	Memory MemoryRecord `json:"memory"`
}

// MemoryPromoted records that a memory moved from tier From to Memory.Tier (working
// to episodic), keeping its ID.
type MemoryPromoted struct {
	Key    string       `json:"key,omitempty"`
	Reason string       `json:"reason"`
	From   string       `json:"from"`
	Memory MemoryRecord `json:"memory"`
}

// MemoryDistilled records a new semantic memory summarised from the memories in
// Memory.Sources (which stay).
type MemoryDistilled struct {
	Key    string       `json:"key,omitempty"`
	Reason string       `json:"reason"`
	Memory MemoryRecord `json:"memory"`
}

// MemoryInvalidated records that a memory stopped being true at AtUS, contradicted
// by the newer memory By. It is kept (its history stays) but marked invalid.
type MemoryInvalidated struct {
	Key      string `json:"key,omitempty"`
	Reason   string `json:"reason"`
	MemoryID string `json:"memory_id"`
	By       string `json:"by,omitempty"`
	AtUS     int64  `json:"at_us"`
}

// MemoryForgotten records that memories were forgotten (removed by a caller, expired,
// evicted for capacity, too old and unimportant): gone from every projection.
type MemoryForgotten struct {
	Key       string   `json:"key,omitempty"`
	Reason    string   `json:"reason"`
	MemoryIDs []string `json:"memory_ids"`
}

// MemoryCleared records that every memory of Tier (every tier when empty) was
// forgotten at once (clear_all).
type MemoryCleared struct {
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
	Tier   string `json:"tier,omitempty"`
}

// MemoryBlockSet records a core block's new value (a block is always in the agent's
// context: persona, human, or one the user defines). Limit is its size bound in
// characters.
type MemoryBlockSet struct {
	Key         string `json:"key,omitempty"`
	Reason      string `json:"reason"`
	Label       string `json:"label"`
	Value       string `json:"value"`
	Limit       int    `json:"limit"`
	Description string `json:"description,omitempty"`
}

// MemoryBlockDeleted records that a core block was deleted.
type MemoryBlockDeleted struct {
	Key    string `json:"key,omitempty"`
	Reason string `json:"reason"`
	Label  string `json:"label"`
}

// MemoryRemembered records that a Remember under Key (the write after task of a
// turn: "<session>/<seq of task.completed>/<task ID>") ran to its end and wrote
// nothing: the turn held no fact (Facts 0), or each of its Facts was decided NONE
// (known already, or nothing to change). It changes no memory; it tells a later
// recovery that the turn was remembered, so its facts are not extracted again. A
// turn that wrote facts has no such event: its memories' events carry its key
// (Key+"/"+i). It also records an Add under a client's request key
// (memory.RequestKey: "<key>#request=<digest>") whose every memory was stored
// already: it keeps the key's request, so that the key sent again with another
// request is refused (Facts 0).
type MemoryRemembered struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
	Facts  int    `json:"facts"`
}

// MessageType implements Payload.
func (*MemoryAdded) MessageType() Type { return TypeMemoryAdded }

// MessageType implements Payload.
func (*MemoryUpdated) MessageType() Type { return TypeMemoryUpdated }

// MessageType implements Payload.
func (*MemoryMerged) MessageType() Type { return TypeMemoryMerged }

// MessageType implements Payload.
func (*MemoryPromoted) MessageType() Type { return TypeMemoryPromoted }

// MessageType implements Payload.
func (*MemoryDistilled) MessageType() Type { return TypeMemoryDistilled }

// MessageType implements Payload.
func (*MemoryInvalidated) MessageType() Type { return TypeMemoryInvalidated }

// MessageType implements Payload.
func (*MemoryForgotten) MessageType() Type { return TypeMemoryForgotten }

// MessageType implements Payload.
func (*MemoryCleared) MessageType() Type { return TypeMemoryCleared }

// MessageType implements Payload.
func (*MemoryBlockSet) MessageType() Type { return TypeMemoryBlockSet }

// MessageType implements Payload.
func (*MemoryBlockDeleted) MessageType() Type { return TypeMemoryBlockDeleted }

// MessageType implements Payload.
func (*MemoryRemembered) MessageType() Type { return TypeMemoryRemembered }

// Vector is an embedding. It travels as base64 of its components as little-endian
// IEEE 754 float32 (a third of the size of a JSON array of numbers, and exact).
type Vector []float32

// MarshalJSON implements json.Marshaler.
func (v Vector) MarshalJSON() ([]byte, error) {
	if v == nil {
		return []byte("null"), nil
	}
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(raw))
}

// UnmarshalJSON implements json.Unmarshaler.
func (v *Vector) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*v = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("vector: want a base64 string: %w", err)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("vector: %w", err)
	}
	if len(raw)%4 != 0 {
		return fmt.Errorf("vector: %d bytes is not a whole number of float32", len(raw))
	}
	out := make(Vector, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	*v = out
	return nil
}

// MemoryChange is an event of a memory namespace's stream: ChangeKey is the
// idempotency key it was made under (Key; empty for a change made without one).
type MemoryChange interface {
	Payload
	ChangeKey() string
}

// ChangeKey implements MemoryChange.
func (p *MemoryAdded) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryUpdated) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryMerged) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryPromoted) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryDistilled) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryInvalidated) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryForgotten) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryCleared) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryBlockSet) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryBlockDeleted) ChangeKey() string { return p.Key }

// ChangeKey implements MemoryChange.
func (p *MemoryRemembered) ChangeKey() string { return p.Key }
