//go:build unix

package lockpid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"
)

// pollWait is how often a lock waited for is tried again.
const pollWait = 50 * time.Millisecond

// Await waits for the lock file at path while another live process holds it
// (one stopping while its successor starts): it calls try, a non-blocking flock,
// every pollWait until it no longer fails with EWOULDBLOCK, wait has passed, or
// ctx ends (its error is returned then). The wait is logged once to log, if not
// nil. A lock held in this process, or by a pid that is gone, is not waited for:
// Await returns EWOULDBLOCK at once.
func Await(ctx context.Context, path string, wait time.Duration, log *slog.Logger, try func() error) error {
	h := Read(path)
	if h.This() || !h.Live() {
		return syscall.EWOULDBLOCK
	}
	if log != nil {
		log.Info(fmt.Sprintf("waiting for %s held by %s", path, h), "wait", wait)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(pollWait)
	defer tick.Stop()
	err := error(syscall.EWOULDBLOCK)
	for errors.Is(err, syscall.EWOULDBLOCK) {
		select {
		case <-deadline.C:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			err = try()
		}
	}
	return err
}
