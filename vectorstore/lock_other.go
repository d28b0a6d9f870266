//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package vectorstore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// lockFile opens path without locking it: on this platform nothing stops two stores
// from opening the same log, and callers must make sure only one does.
func lockFile(_ context.Context, path string, _ time.Duration, _ *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vectorstore: %w", err)
	}
	return f, nil
}
