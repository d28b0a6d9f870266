package mcp

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// The sessions' streams of the log are pruned, as the node prunes the bus's
// stored messages (node/prune.go): a stream whose last event is older than
// SessionTimeout is deleted (eventlog.Pruner), that of a session that ended (its
// client deleted it, or went silent for SessionTimeout) as that of a session
// whose client went away without a word. A live session keeps its stream: the
// server appends messages.MCPSessionKept to the stream of each session it serves
// whose last event is older than half of SessionTimeout, every quarter of it,
// and prunes every SessionTimeout (a deletion is a mutation of several tables on
// ClickHouse). After a restart, the server prunes nothing for a whole
// SessionTimeout: the clients of the sessions live before come back within it
// (and are kept again), and a client that does not has been silent for that
// long, past its session's expiry. Every node of a cluster prunes, each starting
// after a random part of the interval, so that they seldom do at once.

// pruneBatch bounds the streams one PruneStreams call deletes.
const pruneBatch = 1000

// keepEvery is how often the server keeps its live sessions' streams: a quarter
// of the session timeout, within [10 ms, 1 h].
func keepEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/4, 10*time.Millisecond), time.Hour)
}

// pruneSessions keeps the live sessions' streams and prunes the others until ctx
// ends or CloseStreams; it does nothing for a node without a log that prunes.
func (s *Server) pruneSessions(ctx context.Context) {
	p, ok := s.book.log.(eventlog.Pruner)
	if s.book.log == nil || !ok {
		return
	}
	timeout := s.opts.SessionTimeout
	every := keepEvery(timeout)
	nextPrune := time.Now().Add(timeout)
	t := time.NewTimer(time.Duration(rand.Int64N(int64(every))) + 1)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		case <-t.C:
		}
		s.keepLive(ctx, timeout/2)
		if !time.Now().Before(nextPrune) {
			s.pruneOnce(ctx, p, timeout)
			nextPrune = time.Now().Add(timeout)
		}
		t.Reset(every)
	}
}

// keepLive appends messages.MCPSessionKept to the stream of each session the
// server serves whose last event is older than age (one without events has
// nothing to keep).
func (s *Server) keepLive(ctx context.Context, age time.Duration) {
	for ss := range s.sdkSessions() {
		id := ss.ID()
		if id == "" {
			continue // over stdio: nothing recorded
		}
		err := s.book.record(ctx, id, func(st *sessionState) (messages.Payload, error) {
			if st.seq == 0 || time.Since(time.UnixMicro(st.ts)) < age {
				return nil, nil
			}
			return &messages.MCPSessionKept{}, nil
		})
		if err != nil && ctx.Err() == nil {
			s.opts.Logger.Warn("mcp server: a live session's stream not kept; it may be pruned", "session", id, "err", err)
		}
	}
}

// pruneOnce deletes the sessions' streams whose last event is older than
// timeout, and forgets the states the server kept of sessions.
func (s *Server) pruneOnce(ctx context.Context, p eventlog.Pruner, timeout time.Duration) {
	before := time.Now().Add(-timeout).UnixMicro()
	total, err := eventlog.PruneAll(ctx, p, eventlog.MCPSessionStreamPrefix, before, pruneBatch)
	if err != nil && ctx.Err() == nil && !isClosed(s.closing) {
		s.opts.Logger.Warn("mcp server: pruning the ended sessions' streams failed; trying again later", "pruned", total, "err", err)
	}
	if total > 0 {
		s.book.forget()
		s.opts.Logger.Info("mcp server: pruned the streams of ended sessions", "streams", total, "older_than", timeout)
	}
}
