package sqlite

import (
	"context"
)

// Checkpointing moves committed pages from the WAL into the database file, and is
// where synchronous=NORMAL pays its fsyncs. SQLite's automatic checkpoint runs inside
// the commit that crosses the threshold, so that one Append would wait for two
// fsyncs. Instead, the writer asks a checkpointer goroutine, on its own connection,
// for a PASSIVE checkpoint, which runs beside new commits and never blocks them.
// SQLite's automatic checkpoint stays as a backstop, at a much larger WAL, in case
// the checkpointer falls behind.
//
// Both are PASSIVE, which is what makes them safe when several processes share the
// log (Config.Shared): a PASSIVE checkpoint copies what no reader of any process
// still needs, never waits for a reader or a writer, and when another process is
// checkpointing it returns at once (PRAGMA wal_checkpoint reports it busy, not as
// an error). FULL, RESTART and TRUNCATE wait for other processes' writers and
// readers, so this package never runs them. Each process asks for checkpoints
// after its own commits; whichever runs copies the commits of all of them.
const (
	// checkpointTxs and checkpointBytes are the writer's work after which it asks for
	// a checkpoint: a few MiB of WAL.
	checkpointTxs   = 256
	checkpointBytes = 4 << 20
	// backstopCheckpointPages is SQLite's wal_autocheckpoint: 64 MiB of 4 KiB pages.
	backstopCheckpointPages = 16384
)

// committed records a commit of n payload bytes, and asks for a checkpoint when
// enough work piled up since the last ask. It runs in the writer goroutine.
func (l *Log) committed(bytes int) {
	l.sinceCk.txs++
	l.sinceCk.bytes += bytes
	if l.sinceCk.txs < checkpointTxs && l.sinceCk.bytes < checkpointBytes {
		return
	}
	select {
	case l.ckWanted <- struct{}{}:
		l.sinceCk.txs, l.sinceCk.bytes = 0, 0
	default: // one is pending already
	}
}

// runCheckpointer is the checkpointer goroutine. It stops at Close; closing the last
// connection then checkpoints what is left, unless another process still has the
// database open (Config.Shared), whose checkpoints then take it.
func (l *Log) runCheckpointer() {
	defer close(l.ckDone)
	for {
		select {
		case <-l.ckWanted:
			var busy, frames, done int
			if err := l.ckconn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done); err != nil {
				// Not fatal: the next checkpoint, or the backstop, retries.
				l.cfg.Logger.Warn("eventlog/sqlite: background checkpoint failed; the WAL grows until one succeeds",
					"path", l.path, "err", err)
			}
		case <-l.closing:
			return
		}
	}
}

// all returns a channel closed once every one of cs is closed.
func all(cs ...<-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, c := range cs {
			<-c
		}
		close(done)
	}()
	return done
}
