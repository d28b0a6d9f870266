//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package vectorstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"
)

// lockFile opens path and takes an exclusive, non-blocking flock on it, writing this
// process's pid into it. The lock is released when the file is closed or the process
// exits, so a crash leaves no stale lock behind. A lock that another live process
// holds (one stopping while its successor starts) is waited for up to wait, logged
// once to log; a lock held in this process, or by a pid that is gone, is refused at
// once.
func lockFile(path string, wait time.Duration, log *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vectorstore: %w", err)
	}
	err = flock(f)
	if errors.Is(err, syscall.EWOULDBLOCK) && wait > 0 {
		if pid := lockHolder(path); pid > 0 && pid != os.Getpid() && alive(pid) {
			if log != nil {
				log.Info(fmt.Sprintf("waiting for %s held by pid %d", path, pid), "wait", wait)
			}
			for deadline := time.Now().Add(wait); errors.Is(err, syscall.EWOULDBLOCK) && time.Now().Before(deadline); {
				time.Sleep(lockPollWait)
				err = flock(f)
			}
		}
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if pid := lockHolder(path); pid > 0 {
				return nil, fmt.Errorf("%w: %s (held by pid %d)", ErrLocked, path, pid)
			}
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("vectorstore: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockPollWait is how often a lock waited for is tried again.
const lockPollWait = 50 * time.Millisecond

// flock takes an exclusive flock on f without waiting.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// lockHolder is the pid the holder of the lock file at path wrote into it, or 0.
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0
	}
	return pid
}

// alive reports whether a process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
