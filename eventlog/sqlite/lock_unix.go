//go:build unix

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/internal/lockpid"
)

// lockDir takes a flock on <dir>/LOCK: an exclusive one, or with shared a shared one
// (Config.Shared), which other shared openers may hold too. An exclusive holder
// writes its pid into the file, for the error of whoever it refuses; shared holders
// leave the file alone. flock locks belong to the open file description, so a
// conflicting lockDir on the same directory fails whether it comes from another
// process or from this one. The kernel releases the lock when the process dies,
// however it dies. A lock an exclusive holder in another live process keeps past
// the short retries is waited for up to wait (logged once to log), while ctx lasts:
// a node restarted while the one before it is still stopping.
func lockDir(ctx context.Context, dir string, shared bool, wait time.Duration, log *slog.Logger) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open lock file: %w", err)
	}
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	err = flock(f, how)
	// A reader's probe (lockHeld) holds an exclusive lock for an instant: a lock
	// refused while it does is taken a moment later. A holder that stays is
	// reported after lockRetries.
	for i := 0; errors.Is(err, syscall.EWOULDBLOCK) && i < lockRetries; i++ {
		time.Sleep(lockRetryWait)
		err = flock(f, how)
	}
	if errors.Is(err, syscall.EWOULDBLOCK) && wait > 0 {
		err = lockpid.Await(ctx, path, wait, log, func() error { return flock(f, how) })
	}
	if err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("eventlog/sqlite: lock %s: %w", path, err)
		}
		// Who holds it? A shared lock that f can take too means shared holders
		// (they may have changed since, which only makes the message stale).
		if !shared && flock(f, syscall.LOCK_SH) == nil {
			return nil, fmt.Errorf("%w: %s (shared by nodes opened with Config.Shared): stop the other nodes using this data directory, open this one with Shared too, or give it another",
				eventlog.ErrLocked, dir)
		}
		holder := ""
		if h := lockpid.Read(path); h.PID > 0 {
			holder = h.String()
		}
		switch {
		case shared && holder != "":
			holder = " (held by " + holder + ", opened without Config.Shared)"
		case shared:
			holder = " (held by a node opened without Config.Shared)"
		case holder != "":
			holder = " (held by " + holder + ")"
		}
		return nil, fmt.Errorf("%w: %s%s: stop the other node using this data directory, or give this one another",
			eventlog.ErrLocked, dir, holder)
	}
	if !shared {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt(lockpid.Stamp(), 0)
		}
	}
	return f, nil
}

// lockRetries and lockRetryWait bound how long lockDir tries again a lock another
// holds: long past any probe's instant, short beside a node's start.
const (
	lockRetries   = 50
	lockRetryWait = 2 * time.Millisecond
)

// flock takes a lock of kind how (LOCK_EX or LOCK_SH) on f without waiting.
func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// unlockDir releases the lock taken by lockDir, clearing the pid an exclusive holder
// wrote.
func unlockDir(f *os.File, shared bool) error {
	if !shared {
		_ = f.Truncate(0)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("eventlog/sqlite: release lock: %w", err)
	}
	return nil
}

// dirWritable reports whether this process may create files in dir.
func dirWritable(dir string) bool {
	const wOK = 2 // W_OK of access(2)
	return syscall.Access(dir, wOK) == nil
}

// lockHeld reports whether a Log holds dir: a writer holds a flock on LOCK (an
// exclusive one, or with Shared a shared one) as long as it is open. The probe takes
// an exclusive flock on a read-only descriptor and releases it at once.
func lockHeld(dir string) bool {
	f, err := os.Open(filepath.Join(dir, lockFile))
	if err != nil {
		return false // no LOCK file: no Log ever held dir, or this is a copy without it
	}
	defer f.Close()
	return errors.Is(flock(f, syscall.LOCK_EX), syscall.EWOULDBLOCK)
}
