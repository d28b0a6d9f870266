package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
)

// memoryPage is how many events of a namespace's stream sessionMemory reads at
// a time.
const memoryPage = 1000

// memorySkew is how long before a session's first event sessionMemory looks
// for its memory changes: a namespace's events are stamped by the clock of the
// node that owns it, which may run behind the session's.
const memorySkew = time.Hour

// sessionMemory returns the memory changes session id made (memory.ChangeSession):
// the events of the log's memory namespaces, of those with an event since
// sinceUS (the session's first event's time) less memorySkew, whose key is of
// one of the session's events; the namespaces in order of their streams, each
// in seq order. A namespace's events are read a page at a time; the changes
// found are held.
func sessionMemory(ctx context.Context, log eventlog.Log, id string, sinceUS int64) ([]messages.Envelope, error) {
	streams, err := log.Sessions(ctx, eventlog.Filter{Prefix: memory.StreamPrefix, UpdatedSinceUS: max(sinceUS-memorySkew.Microseconds(), 1)})
	if err != nil {
		return nil, fmt.Errorf("listing the memory namespaces: %w", err)
	}
	slices.SortFunc(streams, func(a, b eventlog.SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	var out []messages.Envelope
	for _, s := range streams {
		for from := uint64(1); ; {
			page, err := eventlog.ReadPage(ctx, log, s.ID, from, memoryPage)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", s.ID, err)
			}
			for _, e := range page {
				p, err := e.Decode()
				if err != nil {
					continue // a later build's event: not this session's to say
				}
				if session, ok := memory.ChangeSession(p); ok && session == id {
					out = append(out, e)
				}
			}
			if len(page) < memoryPage {
				break
			}
			from = page[len(page)-1].Seq + 1
		}
	}
	return out, nil
}

// checkMemoryEvent checks an export's memory change e, whose payload is p, read
// after the changes before: an event of a memory namespace's stream that
// session made (memory.ChangeSession), after those before it of its stream.
func checkMemoryEvent(e messages.Envelope, p messages.Payload, session string, before []messages.Envelope) error {
	ns, ok := strings.CutPrefix(e.SessionID, memory.StreamPrefix)
	if !ok || memory.CheckNamespace(ns) != nil {
		return fmt.Errorf("a memory change in stream %q, which is no memory namespace's", e.SessionID)
	}
	if made, ok := memory.ChangeSession(p); !ok || made != session {
		return fmt.Errorf("a %s event of %s that session %s did not make", e.Type, e.SessionID, session)
	}
	for _, b := range slices.Backward(before) {
		if b.SessionID == e.SessionID {
			if b.Seq >= e.Seq {
				return fmt.Errorf("the memory changes of %s are out of order: seq %d after %d", e.SessionID, e.Seq, b.Seq)
			}
			break
		}
		if b.SessionID > e.SessionID {
			return fmt.Errorf("the memory namespaces are out of order: %s after %s", e.SessionID, b.SessionID)
		}
	}
	return nil
}

// writeMemory appends the memory changes of an export to their namespaces'
// streams in log, after what each holds, as planMemory plans them, a
// namespace at a time; restored counts the changes appended.
func writeMemory(ctx context.Context, log eventlog.Log, changes []messages.Envelope) (restored int, skipped []skippedNamespace, err error) {
	batches, skipped, err := planMemory(ctx, log, changes)
	if err != nil {
		return 0, skipped, err
	}
	for _, batch := range batches {
		if err := log.Append(ctx, batch); err != nil {
			return restored, skipped, fmt.Errorf("restoring the session's memory changes to %s: %w", batch[0].SessionID, err)
		}
		restored += len(batch)
	}
	return restored, skipped, nil
}

// planMemory returns the appends that restore the memory changes of an export
// to their namespaces' streams in log, after what each holds, one per
// namespace: an import restores what the session did to its memories, so that
// a memory's history (node memory history, replay show of the namespace)
// explains it in this log as in the one it came from. Each change keeps its
// ID, time and payload; its seq is the next of its stream here. A change the
// stream holds already (by its ID: an import made before) is not appended
// again. A namespace is left as it is, and named in the result (skipped), when
// the session cleared a tier of it (memory.cleared) and it holds events of its
// own here: the clear would remove this log's memories too; and when a change
// would bring back a memory the namespace removed here since, or undo a later
// change to a memory or a block (memory.RestoreConflict).
func planMemory(ctx context.Context, log eventlog.Log, changes []messages.Envelope) (batches [][]messages.Envelope, skipped []skippedNamespace, err error) {
	for len(changes) > 0 {
		stream := changes[0].SessionID
		n := 1
		for n < len(changes) && changes[n].SessionID == stream {
			n++
		}
		these := changes[:n]
		changes = changes[n:]
		held, err := log.Read(ctx, stream, 1)
		if err != nil {
			return nil, skipped, fmt.Errorf("reading %s: %w", stream, err)
		}
		ids := make(map[string]bool, len(held))
		for _, e := range held {
			ids[e.ID] = true
		}
		mine := make(map[string]bool, len(these))
		for _, e := range these {
			mine[e.ID] = true
		}
		ns := strings.TrimPrefix(stream, memory.StreamPrefix)
		others := slices.ContainsFunc(held, func(e messages.Envelope) bool { return !mine[e.ID] })
		clears := slices.ContainsFunc(these, func(e messages.Envelope) bool { return e.Type == messages.TypeMemoryCleared })
		if others && clears {
			skipped = append(skipped, skippedNamespace{ns, fmt.Sprintf("it cleared a tier of it, which would clear this log's memories of %s too", ns)})
			continue
		}
		// Appended, the changes are folded after what the namespace holds: one
		// must not bring back a memory removed here since, nor undo a later change.
		why, err := memory.RestoreConflict(ns, held, these)
		if err != nil {
			return nil, skipped, fmt.Errorf("reading %s: %w", stream, err)
		}
		if why != "" {
			skipped = append(skipped, skippedNamespace{ns, why})
			continue
		}
		seq := uint64(0)
		if len(held) > 0 {
			seq = held[len(held)-1].Seq
		}
		var batch []messages.Envelope
		for _, e := range these {
			if ids[e.ID] {
				continue
			}
			seq++
			e.Seq = seq
			batch = append(batch, e)
		}
		if len(batch) > 0 {
			batches = append(batches, batch)
		}
	}
	return batches, skipped, nil
}

// skippedNamespace is a namespace whose memory changes writeMemory left out,
// and why.
type skippedNamespace struct {
	namespace, why string
}
