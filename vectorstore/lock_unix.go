//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package vectorstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/troupe-run/troupe/internal/lockpid"
)

// lockFile opens path and takes an exclusive, non-blocking flock on it, writing this
// process's pid into it. The lock is released when the file is closed or the process
// exits, so a crash leaves no stale lock behind. A lock that another live process
// holds (one stopping while its successor starts) is waited for up to wait, logged
// once to log, while ctx lasts (its end ends the wait with its error); a lock held in
// this process, or by a pid that is gone, is refused at once.
func lockFile(ctx context.Context, path string, wait time.Duration, log *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vectorstore: %w", err)
	}
	err = flock(f)
	if errors.Is(err, syscall.EWOULDBLOCK) && wait > 0 {
		err = lockpid.Await(ctx, path, wait, log, func() error { return flock(f) })
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if h := lockpid.Read(path); h.PID > 0 {
				return nil, fmt.Errorf("%w: %s (held by %s)", ErrLocked, path, h)
			}
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("vectorstore: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(lockpid.Stamp(), 0)
	}
	return f, nil
}

// flock takes an exclusive flock on f without waiting.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
