// Package nodetest holds the helpers tests use to run a node: start one for a test's
// lifetime, run a task on it and wait for its events. Every wait has a deadline.
package nodetest

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
)

// Start builds and starts a node that lives as long as tb. An empty DataDir gets a
// temporary directory.
func Start(tb testing.TB, cfg node.Config) *node.Node {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	n, stop := StartWithStop(tb, cfg)
	tb.Cleanup(stop)
	return n
}

// StartWithStop builds and starts a node of cfg as it is, and returns it with its
// stop, for a test that stops it itself (a restart, a kill amid a task).
func StartWithStop(tb testing.TB, cfg node.Config) (*node.Node, func()) {
	tb.Helper()
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return n, stop
}

// Run submits a task to a session, waits until it finishes (at most a minute: a hang
// guard, not a speed bound), and returns the session's events from the log.
func Run(tb testing.TB, n *node.Node, sessionID, input string) []messages.Envelope {
	tb.Helper()
	live, stop := n.Watch(sessionID)
	defer stop()
	if _, err := n.Submit(context.Background(), node.Task{Input: input, SessionID: sessionID}); err != nil {
		tb.Fatal(err)
	}
	timeout := time.After(time.Minute)
	for {
		select {
		case e, ok := <-live:
			if !ok {
				tb.Fatalf("session %s: the live feed closed", sessionID)
			}
			if e.Type == messages.TypeTaskCompleted || e.Type == messages.TypeTaskFailed {
				events, err := n.Log().Read(context.Background(), sessionID, 1)
				if err != nil {
					tb.Fatal(err)
				}
				return events
			}
		case <-timeout:
			tb.Fatalf("session %s: the task did not finish within a minute", sessionID)
		}
	}
}
