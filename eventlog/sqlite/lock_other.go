//go:build !unix

package sqlite

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// lockDir creates <dir>/LOCK but takes no lock, shared or exclusive: flock exists on
// Unix only, so on other systems nothing stops two processes from opening one data
// directory.
func lockDir(_ context.Context, dir string, _ bool, _ time.Duration, _ *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("eventlog/sqlite: open lock file: %w", err)
	}
	return f, nil
}

func unlockDir(f *os.File, _ bool) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("eventlog/sqlite: release lock: %w", err)
	}
	return nil
}

// dirWritable is true: without a cheap way to ask, SQLite is left to find out.
func dirWritable(string) bool { return true }

// lockHeld is false: there is no lock to ask.
func lockHeld(string) bool { return false }
