package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Type names a message or event type on the wire. Values are stable strings: they are
// stored in event logs and must never be renamed.
type Type string

// The message and event types.
const (
	TypeTaskSubmitted     Type = "task.submitted"
	TypeModelRequested    Type = "model.requested"
	TypeModelResponded    Type = "model.responded"
	TypeToolCallRequested Type = "tool.requested"
	TypeToolCallCompleted Type = "tool.completed"
	TypeTaskCompleted     Type = "task.completed"
	TypeTaskFailed        Type = "task.failed"
	TypeSessionForked     Type = "session.forked"
	// TypeTeamStateUpdated is a change to the shared state of a team's task.
	TypeTeamStateUpdated Type = "team.state_updated"
	// The events of a tool call that waits for a human's approval (approvals.go).
	TypeApprovalRequested Type = "approval.requested"
	TypeApprovalResolved  Type = "approval.resolved"
	// The events of an agent's notes (package tools/notes), in a stream of their own.
	TypeNoteAdded   Type = "note.added"
	TypeNoteUpdated Type = "note.updated"
	TypeNoteRemoved Type = "note.removed"
	// The events of a memory namespace (package memory), in a stream of its own.
	TypeMemoryAdded        Type = "memory.added"
	TypeMemoryUpdated      Type = "memory.updated"
	TypeMemoryMerged       Type = "memory.merged"
	TypeMemoryPromoted     Type = "memory.promoted"
	TypeMemoryDistilled    Type = "memory.distilled"
	TypeMemoryInvalidated  Type = "memory.invalidated"
	TypeMemoryForgotten    Type = "memory.forgotten"
	TypeMemoryCleared      Type = "memory.cleared"
	TypeMemoryBlockSet     Type = "memory.block_set"
	TypeMemoryBlockDeleted Type = "memory.block_deleted"
	TypeMemoryRemembered   Type = "memory.remembered"
	// The events of a knowledge base (package knowledge), in a stream of its own.
	TypeKBDocumentIngested Type = "kb.document_ingested"
	TypeKBDocumentRemoved  Type = "kb.document_removed"
	// The events of an A2A task's push-notification configs (package a2a), in a
	// stream of their own.
	TypeA2APushSet     Type = "a2a.push_set"
	TypeA2APushDeleted Type = "a2a.push_deleted"
	TypeA2APushFinal   Type = "a2a.push_final"
	// The events of a dashboard sign-in (package node), in a stream of its own.
	TypeUISignedIn  Type = "ui.signed_in"
	TypeUISignedOut Type = "ui.signed_out"
	// The events of an MCP client's session (package mcp), in a stream of its own.
	TypeMCPLevelSet     Type = "mcp.level_set"
	TypeMCPSubscribed   Type = "mcp.subscribed"
	TypeMCPUnsubscribed Type = "mcp.unsubscribed"
	TypeMCPCallStarted  Type = "mcp.call_started"
	TypeMCPSessionKept  Type = "mcp.session_kept"
	TypeMCPSessionEnded Type = "mcp.session_ended"
)

// Versions is the current schema version of each type: the newest this build
// writes and reads. Decoding an envelope whose version is newer than this fails
// with ErrFutureVersion; older versions decode. A payload whose content needs no
// newer version than an older one is written with that one (versioned), so that
// a build which reads only the older one still reads it.
var versions = map[Type]int{
	TypeTaskSubmitted:      1,
	TypeModelRequested:     1,
	TypeModelResponded:     1,
	TypeToolCallRequested:  1,
	TypeToolCallCompleted:  1,
	TypeTaskCompleted:      1,
	TypeTaskFailed:         1,
	TypeSessionForked:      1,
	TypeTeamStateUpdated:   1,
	TypeApprovalRequested:  1,
	TypeApprovalResolved:   1,
	TypeNoteAdded:          1,
	TypeA2APushSet:         1,
	TypeA2APushDeleted:     1,
	TypeA2APushFinal:       1,
	TypeNoteUpdated:        1,
	TypeNoteRemoved:        1,
	TypeMemoryAdded:        1,
	TypeMemoryUpdated:      1,
	TypeMemoryMerged:       1,
	TypeMemoryPromoted:     1,
	TypeMemoryDistilled:    1,
	TypeMemoryInvalidated:  1,
	TypeMemoryForgotten:    1,
	TypeMemoryCleared:      1,
	TypeMemoryBlockSet:     1,
	TypeMemoryBlockDeleted: 1,
	TypeMemoryRemembered:   1,
	// 2: a part of a document's chunk set split across events (Parts > 1), which
	// a build reading version 1 only would take for the whole document.
	TypeKBDocumentIngested: 2,
	TypeKBDocumentRemoved:  1,
	TypeModelDelta:         1,
	TypeUISignedIn:         1,
	TypeUISignedOut:        1,
	TypeBusStored:          1,
	TypeMCPLevelSet:        1,
	TypeMCPSubscribed:      1,
	TypeMCPUnsubscribed:    1,
	TypeMCPCallStarted:     1,
	TypeMCPSessionKept:     1,
	TypeMCPSessionEnded:    1,
	TypeConfigRecorded:     1,
}

// CurrentVersion reports the newest schema version this build writes and reads
// for t, and whether t is known. NewEnvelope may write a payload with an older
// one, the one its content is of (kb.document_ingested: KBDocumentIngested).
func CurrentVersion(t Type) (int, bool) {
	v, ok := versions[t]
	return v, ok
}

// Errors returned by decoding. Each is wrapped with the envelope's session and seq.
var (
	ErrCorrupt       = errors.New("messages: corrupt envelope")
	ErrUnknownType   = errors.New("messages: unknown message type")
	ErrFutureVersion = errors.New("messages: schema version newer than this build")
)

// Envelope carries one message or event. A message becomes an event once the session
// actor that owns SessionID assigns it a Seq and appends it to the event log.
type Envelope struct {
	// ID is unique per message; handlers deduplicate on it (at-least-once delivery).
	ID string `json:"id"`
	// SessionID keys the message: one session actor owns it, and the bus partitions by it.
	SessionID string `json:"session_id"`
	// Seq is the position in the session's log, starting at 1, gap-free; 0 until sequenced.
	Seq uint64 `json:"seq"`
	// Type says which payload type Payload holds.
	Type Type `json:"type"`
	// Version is the schema version of Payload.
	Version int `json:"v"`
	// CausationID is the ID of the message that caused this one.
	CausationID string `json:"causation_id,omitempty"`
	// CorrelationID groups everything that belongs to one task (the task message's ID).
	CorrelationID string `json:"correlation_id,omitempty"`
	// TS is the time the message was created, in Unix microseconds.
	TS int64 `json:"ts"`
	// Actor names the producer, e.g. "session", "model/offline", "tool/calculator".
	Actor string `json:"actor"`
	// Payload is the JSON encoding of the type named by Type.
	Payload json.RawMessage `json:"payload"`
}

// Payload is implemented by every concrete payload type in this package.
type Payload interface {
	MessageType() Type
}

// versioned is a payload whose schema version depends on its content: one that
// needs nothing of its type's newest version says the older one it is of, and
// is written with it.
type versioned interface {
	schemaVersion() int
}

// versionOf is the schema version p is written with (NewEnvelope): its type's
// current one (CurrentVersion), or the older one its content is of.
func versionOf(p Payload) int {
	if v, ok := p.(versioned); ok {
		return v.schemaVersion()
	}
	return versions[p.MessageType()]
}

// NewEnvelope encodes p as the payload of a new envelope with its schema version
// (versionOf). The caller fills in IDs, Seq, TS and Actor.
func NewEnvelope(p Payload) (Envelope, error) {
	if a, ok := p.(jsonAppender); ok {
		if b, ok := appendedJSON(a); ok {
			return Envelope{Type: p.MessageType(), Version: versionOf(p), Payload: b}, nil
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return Envelope{}, fmt.Errorf("messages: encode %s: %w", p.MessageType(), err)
	}
	return Envelope{Type: p.MessageType(), Version: versionOf(p), Payload: b}, nil
}

// Marshal encodes an envelope: json.Marshal's bytes, by AppendEnvelope. The encoding
// is deterministic.
func Marshal(e Envelope) ([]byte, error) {
	b, err := AppendEnvelope(make([]byte, 0, e.SizeHint()), e)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Unmarshal decodes and validates an envelope (not its payload: see Decode).
func Unmarshal(b []byte) (Envelope, error) {
	var e Envelope
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if d.More() {
		return Envelope{}, fmt.Errorf("%w: trailing data after envelope", ErrCorrupt)
	}
	if err := e.validateFields(); err != nil {
		return Envelope{}, err
	}
	// The decoder scanned the whole envelope before it decoded it, so a payload it
	// found is one valid JSON value (a payload of null decodes as the bytes "null");
	// only a missing one is left to refuse.
	if len(e.Payload) == 0 {
		return Envelope{}, e.errPayload()
	}
	return e, nil
}

// Decode decodes the payload into its concrete type. Unknown types and versions newer
// than this build are errors that name the session and seq.
func (e Envelope) Decode() (Payload, error) {
	return e.decode(versions)
}

// decode is Decode by a build that reads the versions of table.
func (e Envelope) decode(table map[Type]int) (Payload, error) {
	cur, ok := table[e.Type]
	if !ok {
		return nil, fmt.Errorf("%w %q (session %s seq %d)", ErrUnknownType, e.Type, e.SessionID, e.Seq)
	}
	if e.Version > cur {
		return nil, fmt.Errorf("%w: %s v%d, this build reads up to v%d (session %s seq %d)",
			ErrFutureVersion, e.Type, e.Version, cur, e.SessionID, e.Seq)
	}
	var p Payload
	switch e.Type {
	case TypeTaskSubmitted:
		p = &TaskSubmitted{}
	case TypeModelRequested:
		p = &ModelRequested{}
	case TypeModelResponded:
		p = &ModelResponded{}
	case TypeModelDelta:
		p = &ModelDelta{}
	case TypeToolCallRequested:
		p = &ToolCallRequested{}
	case TypeToolCallCompleted:
		p = &ToolCallCompleted{}
	case TypeTaskCompleted:
		p = &TaskCompleted{}
	case TypeTaskFailed:
		p = &TaskFailed{}
	case TypeSessionForked:
		p = &SessionForked{}
	case TypeTeamStateUpdated:
		p = &TeamStateUpdated{}
	case TypeApprovalRequested:
		p = &ApprovalRequested{}
	case TypeApprovalResolved:
		p = &ApprovalResolved{}
	case TypeNoteAdded:
		p = &NoteAdded{}
	case TypeA2APushSet:
		p = &A2APushSet{}
	case TypeA2APushDeleted:
		p = &A2APushDeleted{}
	case TypeA2APushFinal:
		p = &A2APushFinal{}
	case TypeUISignedIn:
		p = &UISignedIn{}
	case TypeUISignedOut:
		p = &UISignedOut{}
	case TypeBusStored:
		p = &BusStored{}
	case TypeMCPLevelSet:
		p = &MCPLevelSet{}
	case TypeMCPSubscribed:
		p = &MCPSubscribed{}
	case TypeMCPUnsubscribed:
		p = &MCPUnsubscribed{}
	case TypeMCPCallStarted:
		p = &MCPCallStarted{}
	case TypeMCPSessionKept:
		p = &MCPSessionKept{}
	case TypeMCPSessionEnded:
		p = &MCPSessionEnded{}
	case TypeConfigRecorded:
		p = &ConfigRecorded{}
	case TypeNoteUpdated:
		p = &NoteUpdated{}
	case TypeNoteRemoved:
		p = &NoteRemoved{}
	case TypeMemoryAdded:
		p = &MemoryAdded{}
	case TypeMemoryUpdated:
		p = &MemoryUpdated{}
	case TypeMemoryMerged:
		p = &MemoryMerged{}
	case TypeMemoryPromoted:
		p = &MemoryPromoted{}
	case TypeMemoryDistilled:
		p = &MemoryDistilled{}
	case TypeMemoryInvalidated:
		p = &MemoryInvalidated{}
	case TypeMemoryForgotten:
		p = &MemoryForgotten{}
	case TypeMemoryCleared:
		p = &MemoryCleared{}
	case TypeMemoryBlockSet:
		p = &MemoryBlockSet{}
	case TypeMemoryBlockDeleted:
		p = &MemoryBlockDeleted{}
	case TypeMemoryRemembered:
		p = &MemoryRemembered{}
	case TypeKBDocumentIngested:
		p = &KBDocumentIngested{}
	case TypeKBDocumentRemoved:
		p = &KBDocumentRemoved{}
	}
	if err := json.Unmarshal(e.Payload, p); err != nil {
		return nil, fmt.Errorf("%w: session %s seq %d: %s payload: %v", ErrCorrupt, e.SessionID, e.Seq, e.Type, err)
	}
	return p, nil
}

// PayloadBytes is the length of events' payloads together: what a page of
// events weighs against a bound in bytes (the logs' ReadN counts so).
func PayloadBytes(events []Envelope) int {
	n := 0
	for _, e := range events {
		n += len(e.Payload)
	}
	return n
}
