package eventlog

import (
	"context"
	"errors"

	"github.com/troupe-run/troupe/messages"
)

// Log is the append-only event log seam. Implementations are safe for concurrent use.
type Log interface {
	// Append writes a batch atomically: all events become visible, or none do.
	// Every event must have an ID, a SessionID and a Seq > 0. Appending an event whose
	// ID is already stored is a no-op (at-least-once safe). Appending a different event
	// at a (session, seq) that is taken fails with ErrSeqConflict and writes nothing.
	Append(ctx context.Context, events []messages.Envelope) error
	// Read returns the events of a session with Seq >= fromSeq, in Seq order. An
	// unknown session returns no events and no error. A stored event that cannot be
	// decoded is returned as an error wrapping messages.ErrCorrupt that names the
	// session and seq; it is never skipped.
	Read(ctx context.Context, sessionID string, fromSeq uint64) ([]messages.Envelope, error)
	// Sessions lists sessions, most recently started first.
	Sessions(ctx context.Context, f Filter) ([]SessionInfo, error)
	// Close releases the log. It is idempotent.
	Close() error
}

// Filter narrows Sessions. The zero value lists every session.
type Filter struct {
	// SinceUS keeps sessions started at or after this Unix-microsecond time.
	SinceUS int64
	// Limit bounds the number of sessions; 0 means no bound.
	Limit int
}

// SessionInfo summarises one session of the log.
type SessionInfo struct {
	ID string `json:"session_id"`
	// Status is messages.StatusRunning, StatusCompleted or StatusFailed, from the
	// session's latest task.* event.
	Status string `json:"status"`
	// Events is the number of events; LastSeq the highest seq.
	Events  int    `json:"events"`
	LastSeq uint64 `json:"last_seq"`
	// Steps is the number of model calls requested (model.requested events).
	Steps     int   `json:"steps"`
	StartedUS int64 `json:"started_us"`
	UpdatedUS int64 `json:"updated_us"`
}

// Errors of the event log.
var (
	// ErrSeqConflict means another event already holds that (session, seq): two writers.
	ErrSeqConflict = errors.New("eventlog: seq already taken by a different event")
	// ErrInvalidEvent means an event lacks an ID, a session or a seq.
	ErrInvalidEvent = errors.New("eventlog: invalid event")
	// ErrLocked means another process holds the log's data directory.
	ErrLocked = errors.New("eventlog: data directory is locked by another process")
)
