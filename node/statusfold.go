package node

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// statusFolds keeps the folds the reads of a session's state make (GET
// /v1/sessions/{id} and the dashboard's session view, Status for cancel, MCP's
// tasks and delegates, TaskResult, Approve, PendingApprovals), so that the next
// read of a long session folds only the events appended since, not its whole
// history: a client polling a session of 100,000 events folded them all at each
// poll, seconds of a core.
//
// A kept fold is the state a fold of the session's events from seq 1 gave, as
// the read that made it found them in the log (actors.NewSessionState, without
// agents, as these reads always folded: a session actor's state, folded with its
// agents' paradigms, or its fold snapshot, would answer otherwise of a
// paradigm's calls). A read uses it only when the log still holds the events it
// folded last (logTail.heldIn: the IDs of its last feedVerify events at their
// seqs, as the session feed checks its folds after a takeover, and the digest of
// the last, as a fold snapshot's event at its seq, so that a session pruned and
// begun again, whose decided events have the same IDs, does not pass for it);
// then it folds the events after them, else, or when that fold fails, it folds
// the whole history as before. Either way the answer is the whole fold's.
//
// Reads do not go to the session's owner: every node folds the log it reads (in
// a cluster, the shared one), as before; a kept fold only spares the events it
// checked are there already.
type statusFolds struct {
	mu    sync.Mutex
	folds lru[*statusFold]
	// bytes are the payload bytes of the events the kept folds folded.
	bytes int64
	// maxBytes is statusFoldBytes unless set (tests).
	maxBytes int64
}

// statusFoldSessions and statusFoldBytes bound the folds kept (each holds a
// session's state, its conversation with it, which the payload bytes of its
// events bound): the least recently used are dropped first, and a session
// whose fold was dropped costs one read of its whole history at its next read.
const (
	statusFoldSessions = 64
	statusFoldBytes    = 256 << 20
)

// statusFoldFrom is the fewest events a session has whose fold is kept, and
// statusFoldFromBytes the fewest payload bytes: a shorter one is folded whole at
// each read, which costs little, and its state takes no room. A task's input
// alone may be 1 MiB: a session of 20 such tasks, 80 events, read and decoded
// its 21 MB at each read, and a hundred clients polling it at once took seconds
// each, and past the write timeout had no answer.
const (
	statusFoldFrom      = 256
	statusFoldFromBytes = 1 << 20
)

// worthKeeping reports whether the fold of a session whose events are these is
// kept.
func worthKeeping(events []messages.Envelope) bool {
	return len(events) >= statusFoldFrom || messages.PayloadBytes(events) >= statusFoldFromBytes
}

// statusFold is the kept fold of one session's events.
type statusFold struct {
	session string
	// turn is held (a value in it) while a read folds on and answers from st,
	// one read at a time; a read waits for it no longer than its context lasts,
	// as it would not have waited for the log.
	turn chan struct{}
	// st is the session's events folded from seq 1 to st.LastSeq; nil when none is kept.
	st *actors.SessionState
	// tail are the last events st folded, through st.LastSeq, as the log held
	// them (at most feedVerify), with the digest of the last.
	tail logTail
	// bytes are the payload bytes of the events st folded; guarded by
	// statusFolds.mu.
	bytes int64
}

// with calls use with the state of session id folded from its events in the log
// (ErrUnknownSession when it has none), from its kept fold and the events after
// it when the log still holds those the fold read last; known reports that the
// log has events of the session (false when it could not be read). A read of a
// session with a kept fold runs while no other read folds it on; one of a
// session without (a short one) runs beside the others, and keeps the fold it
// made when the session has statusFoldFrom events or more, or statusFoldFromBytes
// of payload. use must not keep st, nor change it.
func (f *statusFolds) with(ctx context.Context, log eventlog.Log, id string, use func(st *actors.SessionState) error) (known bool, err error) {
	return f.fold(ctx, log, id, true, use)
}

// withKept is with for a read of every running session (PendingApprovals): it
// folds on a session's kept fold, but keeps none for a session that has none,
// so that a sweep of more sessions than statusFoldSessions does not drop the
// folds of the sessions polled one by one.
func (f *statusFolds) withKept(ctx context.Context, log eventlog.Log, id string, use func(st *actors.SessionState) error) (known bool, err error) {
	return f.fold(ctx, log, id, false, use)
}

func (f *statusFolds) fold(ctx context.Context, log eventlog.Log, id string, keepNew bool, use func(st *actors.SessionState) error) (known bool, err error) {
	if ent := f.kept(id); ent != nil {
		select {
		case ent.turn <- struct{}{}:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		defer func() { <-ent.turn }()
		if ent.st != nil {
			events, err := log.Read(ctx, id, ent.tail.from)
			if err != nil {
				return false, err
			}
			if after, held := ent.tail.heldIn(events); held && applyAll(ent.st, events[after:]) == nil {
				ent.keep(ent.st, events)
				f.account(ent, int64(messages.PayloadBytes(events[after:])), false)
				return true, use(ent.st)
			}
			ent.st = nil // the whole history's fold says what is wrong, if anything
			f.account(ent, 0, true)
		}
		st, events, err := foldWhole(ctx, log, id)
		if st == nil {
			f.forget(ent)
			return false, err
		}
		if err != nil || !worthKeeping(events) {
			f.forget(ent)
			if err != nil {
				return true, err
			}
			return true, use(st)
		}
		ent.keep(st, events)
		f.account(ent, int64(messages.PayloadBytes(events)), true)
		return true, use(st)
	}
	st, events, err := foldWhole(ctx, log, id)
	if st == nil {
		return false, err
	}
	if err != nil {
		return true, err
	}
	if keepNew && worthKeeping(events) {
		ent := f.entry(id)
		select {
		case ent.turn <- struct{}{}:
			defer func() { <-ent.turn }()
			if ent.st == nil {
				ent.keep(st, events)
				f.account(ent, int64(messages.PayloadBytes(events)), true)
			}
		default: // another read folds the session on: it keeps its own
		}
	}
	return true, use(st)
}

// foldWhole folds session id's whole history: st is nil when it could not be
// read or has no events (ErrUnknownSession).
func foldWhole(ctx context.Context, log eventlog.Log, id string) (st *actors.SessionState, events []messages.Envelope, err error) {
	events, err = log.Read(ctx, id, 1)
	if err != nil {
		return nil, nil, err
	}
	if len(events) == 0 {
		return nil, []messages.Envelope{}, fmt.Errorf("%w: %q", ErrUnknownSession, id)
	}
	st = actors.NewSessionState(id)
	return st, events, applyAll(st, events)
}

// account counts n more payload bytes folded by ent (its count reset first
// when anew), and drops the least recently used folds while they hold more than
// statusFoldBytes; ent alone when it alone holds more. A fold dropped already
// is not counted.
func (f *statusFolds) account(ent *statusFold, n int64, anew bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kept, ok := f.folds.peek(ent.session); !ok || kept != ent {
		return
	}
	if anew {
		f.bytes -= ent.bytes
		ent.bytes = 0
	}
	ent.bytes += n
	f.bytes += n
	limit := cmp.Or(f.maxBytes, statusFoldBytes)
	if ent.bytes > limit {
		f.drop(ent) // not the others for it
		return
	}
	for f.bytes > limit && f.folds.len() > 0 {
		_, old, _ := f.folds.dropOldest()
		f.bytes -= old.bytes
	}
}

// drop forgets the kept fold ent; the caller holds f.mu.
func (f *statusFolds) drop(ent *statusFold) {
	f.folds.remove(ent.session)
	f.bytes -= ent.bytes
}

// applyAll folds events into st.
func applyAll(st *actors.SessionState, events []messages.Envelope) error {
	for _, e := range events {
		if err := st.Apply(e); err != nil {
			return err
		}
	}
	return nil
}

// keep keeps st, folded through the last of events (read from the log), with
// the IDs of the last of them.
func (ent *statusFold) keep(st *actors.SessionState, events []messages.Envelope) {
	ent.st, ent.tail = st, tailOf(events, feedVerify)
}

// kept returns the kept fold of session id, nil when none is kept.
func (f *statusFolds) kept(id string) *statusFold {
	f.mu.Lock()
	defer f.mu.Unlock()
	ent, _ := f.folds.get(id)
	return ent
}

// forget drops ent, which keeps no fold, unless it was dropped already.
func (f *statusFolds) forget(ent *statusFold) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if kept, ok := f.folds.peek(ent.session); ok && kept == ent {
		f.drop(ent)
	}
}

// entry returns the kept fold of session id, or a new empty one, kept from now
// on in place of the least recently used when there are statusFoldSessions
// already.
func (f *statusFolds) entry(id string) *statusFold {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ent, ok := f.folds.get(id); ok {
		return ent
	}
	ent := &statusFold{session: id, turn: make(chan struct{}, 1)}
	if old, ok := f.folds.put(id, ent, statusFoldSessions); ok {
		// A read folding on the dropped fold still answers; what it keeps there
		// is lost.
		f.bytes -= old.bytes
	}
	return ent
}
