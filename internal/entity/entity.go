// Package entity holds what the event-sourced entities of a node that are not
// sessions share: memory namespaces (package memory) and knowledge bases (package
// knowledge). Each is a stream of its own in the event log; its state is the fold of
// that stream, brought up to date before every operation; a change is decided
// against the folded state and appended at the next seqs, decided again when another
// writer took them, and made at most once per idempotency key.
//
// Loaded holds the entities of one kind that a process keeps in memory, folded on
// first use and released (passivated) when idle or past a bound, least recently
// used first: a node serving many namespaces or knowledge bases does not grow
// without bound.
package entity

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// MaxAttempts bounds the appends of one write that lose their seq to another
// writer of the stream.
const MaxAttempts = 20

// Fold is an entity's folded state, as Stream needs it.
type Fold interface {
	// Seq returns the highest seq folded (0 before the first event).
	Seq() uint64
	// Apply folds one event of the stream (and the entity's in-memory projections).
	Apply(e messages.Envelope) error
	// Sync brings the projections kept outside the process (a vector store) in line
	// with the fold. What a failed Sync leaves is tried again by the next one.
	Sync(ctx context.Context) error
	// Applied reports whether a change with this idempotency key was folded.
	Applied(key string) bool
}

// Stream is an entity's stream in the event log.
type Stream struct {
	Log eventlog.Log
	// ID is the stream's ID in the log (the log's session ID).
	ID string
	// Kind names the entity kind in errors ("memory", "knowledge", "notes").
	Kind string
	// Actor is the Actor of its events (default Kind).
	Actor string
	// IDPrefix starts the IDs of its events ("mem-", "kb-").
	IDPrefix string
	// Now is the clock of its events.
	Now func() time.Time
	// Closed, when it returns an error, stops every read and write with it.
	Closed func() error
	// Conflict is wrapped by the error of a write that lost its seq MaxAttempts
	// times in a row.
	Conflict error
}

// CatchUp folds the events appended since f's last fold, then syncs f's outside
// projections.
func (s *Stream) CatchUp(ctx context.Context, f Fold) error {
	if s.Closed != nil {
		if err := s.Closed(); err != nil {
			return err
		}
	}
	events, err := s.Log.Read(ctx, s.ID, f.Seq()+1)
	if err != nil {
		return fmt.Errorf("%s: reading %s: %w", s.Kind, s.ID, err)
	}
	for _, e := range events {
		if err := f.Apply(e); err != nil {
			return err
		}
	}
	return f.Sync(ctx)
}

// Write makes one change: it catches f up and, unless the key was applied already
// (applied true), appends the events change builds for the next seqs in one
// Append, then folds them. When another writer took those seqs it catches up and
// calls change again, up to MaxAttempts times. change decides against the folded
// state: its error is returned with nothing written, except one wrapping
// eventlog.ErrSeqConflict (a write of its own lost its seq), which starts the
// next attempt; no payloads write nothing.
func (s *Stream) Write(ctx context.Context, f Fold, key string, change func(ctx context.Context) ([]messages.Payload, error)) (applied bool, err error) {
	for attempt := range MaxAttempts {
		if err := s.CatchUp(ctx, f); err != nil {
			return false, err
		}
		if key != "" && f.Applied(key) {
			return true, nil
		}
		ps, err := change(ctx)
		if errors.Is(err, eventlog.ErrSeqConflict) {
			continue
		}
		if err != nil || len(ps) == 0 {
			return false, err
		}
		events, err := s.Events(key, f.Seq(), ps)
		if err != nil {
			return false, err
		}
		err = s.Log.Append(ctx, events)
		if errors.Is(err, eventlog.ErrSeqConflict) {
			// Another writer took the seq: catch up, then decide again, after a
			// random pause that grows with the attempts, so that two writers that
			// keep meeting stop taking turns in lockstep.
			if err := conflictPause(ctx, attempt); err != nil {
				return false, err
			}
			continue
		}
		if err != nil {
			return false, fmt.Errorf("%s: appending to %s: %w", s.Kind, s.ID, err)
		}
		for _, e := range events {
			if err := f.Apply(e); err != nil {
				return false, err
			}
		}
		if err := f.Sync(ctx); err != nil {
			return false, fmt.Errorf("%s: the change is stored (seq %d) but the vector store lags; the next operation tries again: %w", s.Kind, events[len(events)-1].Seq, err)
		}
		return false, nil
	}
	return false, fmt.Errorf("%w: %d appends in a row found their seq taken by another writer", s.Conflict, MaxAttempts)
}

// conflictPause waits a random time below 2^attempt ms, at most maxConflictPause,
// or until ctx ends.
func conflictPause(ctx context.Context, attempt int) error {
	limit := min(time.Millisecond<<attempt, maxConflictPause)
	t := time.NewTimer(time.Duration(mrand.Int64N(int64(limit)) + 1))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxConflictPause bounds a pause after a seq conflict.
const maxConflictPause = 50 * time.Millisecond

// Events returns the events of one write of ps at the seqs after seq, stamped now.
func (s *Stream) Events(key string, seq uint64, ps []messages.Payload) ([]messages.Envelope, error) {
	events := make([]messages.Envelope, len(ps))
	now := s.Now().UnixMicro()
	for i, p := range ps {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			return nil, err
		}
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = s.eventID(key, i, e.Payload), s.ID, seq+1+uint64(i), now, cmp.Or(s.Actor, s.Kind)
		events[i] = e
	}
	return events, nil
}

// eventID is the ID of the i-th event of a write: derived from the key and the
// payload when there is a key, so that the same call's events are the same events
// wherever they are appended. The payload is part of it because the log takes an
// event whose ID is already stored at its (stream, seq) as a repeat without looking
// at its payload: two writers deciding differently under one key (new IDs each)
// must conflict, so that the loser folds and returns the winner's result.
func (s *Stream) eventID(key string, i int, payload []byte) string {
	if key == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return s.IDPrefix + hex.EncodeToString(b[:])
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", s.ID, key, i)
	h.Write(payload)
	return s.IDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// List returns the names of the streams in log whose IDs start with prefix and
// that isStream accepts, without the prefix, sorted.
func List(ctx context.Context, log eventlog.Log, prefix string, isStream func(string) bool) ([]string, error) {
	infos, err := log.Sessions(ctx, eventlog.Filter{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range infos {
		if isStream(s.ID) {
			out = append(out, s.ID[len(prefix):])
		}
	}
	slices.Sort(out)
	return out, nil
}
