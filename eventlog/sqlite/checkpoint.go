package sqlite

import (
	"context"
	"fmt"
	"time"
)

// Checkpointing moves committed pages from the WAL into the database file, and is
// where synchronous=NORMAL pays its fsyncs. SQLite's automatic checkpoint runs inside
// the commit that crosses the threshold, so that one Append would wait for two
// fsyncs. Instead, the writer asks a checkpointer goroutine, on its own connection,
// for a PASSIVE checkpoint, which runs beside new commits and never blocks them.
// SQLite's automatic checkpoint stays as a backstop, at a much larger WAL, in case
// the checkpointer falls behind.
//
// A checkpoint alone never shrinks the -wal file: SQLite starts writing it from the
// beginning again (a restart) only when a transaction begins with every frame
// copied, and keeps the file at its largest size. Under steady load a PASSIVE
// checkpoint never catches up with the writer, so the WAL used to restart only at
// the backstop and stay 64 MiB on disk for good. So:
//
//   - journal_size_limit truncates the file to walSizeLimit at the first commit
//     after a restart (when every frame was copied, a PASSIVE checkpoint that
//     caught up, or the backstop);
//   - when the writer has committed nothing for idleCheckpointAfter, the
//     checkpointer runs a TRUNCATE checkpoint, which leaves an empty -wal file.
//
// Under load the WAL is not restarted by force: a RESTART checkpoint holds the
// write lock while it copies, which stalls the writer, and under steady load it
// seldom found the writer idle anyway; the backstop bounds the WAL then, and the first
// idle second truncates it. TRUNCATE takes the write lock and then waits for
// readers of older frames; the checkpointer's connection has no busy timeout, so
// instead of waiting (and keeping this process's writer, or another's with
// Config.Shared, waiting behind it) it gives up at once, reported busy, and the
// next idle tick tries again. The write lock is held only to copy what the PASSIVE
// checkpoint just before left.
// PASSIVE copies what no reader of any process still needs and never waits; when
// another process is checkpointing it returns at once. Each process asks for
// checkpoints after its own commits; whichever runs copies the commits of all of them.
const (
	// checkpointTxs and checkpointBytes are the writer's work after which it asks for
	// a checkpoint: a few MiB of WAL.
	checkpointTxs   = 256
	checkpointBytes = 4 << 20
	// backstopCheckpointPages is SQLite's wal_autocheckpoint: 64 MiB of 4 KiB pages.
	backstopCheckpointPages = 16384
	// walSizeLimit is the WAL's size (journal_size_limit) beyond which it is
	// truncated at a restart: the backstop's. Under steady load the WAL restarts
	// and grows again all the time, and a file cut shorter at each restart has its
	// blocks allocated again as it grows (5% of the embedded node's steps/s in
	// BenchmarkLoopNodeConcurrent at 8 MiB); the idle TRUNCATE shrinks it.
	walSizeLimit = backstopCheckpointPages * 4096
	// idleCheckpointAfter is how long the writer commits nothing before the
	// checkpointer truncates the WAL; it looks that often.
	idleCheckpointAfter = time.Second
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
	idle := time.NewTicker(idleCheckpointAfter)
	defer idle.Stop()
	seen := l.stats.transactions.Load()
	truncated := false // a WAL left by an earlier process is truncated once idle too
	for {
		select {
		case <-l.ckWanted:
			truncated = false
			l.checkpoint("PASSIVE")
		case <-idle.C:
			if n := l.stats.transactions.Load(); n != seen {
				seen, truncated = n, false
				continue
			}
			if truncated {
				continue
			}
			// PASSIVE first copies everything without the write lock, so that
			// TRUNCATE holds it only to empty the file.
			if _, ok := l.checkpoint("PASSIVE"); !ok {
				continue
			}
			ck, ok := l.checkpoint("TRUNCATE")
			truncated = ok && ck.busy == 0
		case <-l.closing:
			return
		}
	}
}

// walCheckpoint is what PRAGMA wal_checkpoint reports: whether it could not finish
// (another connection held a lock it needs), the frames in the WAL, and how many of
// them are copied into the database.
type walCheckpoint struct{ busy, frames, copied int }

// checkpoint runs PRAGMA wal_checkpoint(mode) on the checkpointer's connection. A
// failure is logged, not returned: the next checkpoint, or the backstop, retries.
func (l *Log) checkpoint(mode string) (walCheckpoint, bool) {
	var ck walCheckpoint
	err := l.ckconn.QueryRowContext(context.Background(), fmt.Sprintf("PRAGMA wal_checkpoint(%s)", mode)).Scan(&ck.busy, &ck.frames, &ck.copied)
	if err != nil {
		l.cfg.Logger.Warn("eventlog/sqlite: background checkpoint failed; the WAL grows until one succeeds",
			"path", l.path, "mode", mode, "err", err)
		return ck, false
	}
	return ck, true
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
