//go:build unix

package sqlite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/troupe-run/troupe/eventlog"
)

// lockDir takes an exclusive flock on <dir>/LOCK and writes this process's pid into
// it. flock locks belong to the open file description, so a second lockDir on the same
// directory fails whether it comes from another process or from this one. The kernel
// releases the lock when the process dies, however it dies.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(string(bytes.TrimSpace(b))); perr == nil {
				holder = fmt.Sprintf(" (held by pid %d)", pid)
			}
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s%s: stop the other node using this data directory, or give this one another",
				eventlog.ErrLocked, dir, holder)
		}
		return nil, fmt.Errorf("eventlog/sqlite: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// unlockDir releases the lock taken by lockDir.
func unlockDir(f *os.File) error {
	_ = f.Truncate(0)
	if err := f.Close(); err != nil {
		return fmt.Errorf("eventlog/sqlite: release lock: %w", err)
	}
	return nil
}
