package messages

// The events of an agent's notes. They are appended to a stream of their own,
// "notes/<agent>" (not a session: no task ever runs there), and the notes are the
// fold of that stream (package tools/notes). Key is the idempotency key of the tool
// call that made the change (tools.Call.Key), empty for a change made without one: a
// change whose key is already in the stream is not made again.

// NoteAdded records a new note.
type NoteAdded struct {
	Key    string `json:"key,omitempty"`
	NoteID string `json:"note_id"`
	// Type is the note's kind, chosen by the agent: "fact", "todo", "decision", ….
	Type string   `json:"type"`
	Tags []string `json:"tags,omitempty"`
	Body string   `json:"body"`
}

// NoteUpdated records a change to a note: the fields that are set replace the
// note's, the others stay as they were (Tags set to an empty list clears them).
type NoteUpdated struct {
	Key    string    `json:"key,omitempty"`
	NoteID string    `json:"note_id"`
	Type   *string   `json:"type,omitempty"`
	Tags   *[]string `json:"tags,omitempty"`
	Body   *string   `json:"body,omitempty"`
}

// NoteRemoved records that a note was removed.
type NoteRemoved struct {
	Key    string `json:"key,omitempty"`
	NoteID string `json:"note_id"`
}

// MessageType implements Payload.
func (*NoteAdded) MessageType() Type { return TypeNoteAdded }

// MessageType implements Payload.
func (*NoteUpdated) MessageType() Type { return TypeNoteUpdated }

// MessageType implements Payload.
func (*NoteRemoved) MessageType() Type { return TypeNoteRemoved }
