package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// stuckListingLog is a SQLite log whose listings of running sessions (the resume
// at an embedded start) hang until their context ends (hang), or fail with err.
type stuckListingLog struct {
	*sqlite.Log
	hang    bool
	err     error
	entered chan struct{}
	once    sync.Once
}

func (l *stuckListingLog) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if f.Status == messages.StatusRunning {
		l.once.Do(func() { close(l.entered) })
		if l.hang {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if l.err != nil {
			return nil, l.err
		}
	}
	return l.Log.Sessions(ctx, f)
}

func runStuckListing(t *testing.T, log *stuckListingLog, logs *syncBuffer) (cancel func(), done <-chan error) {
	t.Helper()
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log.Log, log.entered = base, make(chan struct{})
	scripted, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.Config{Log: log, NodeID: "a", Model: scripted, DataDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	errc := make(chan error, 1)
	go func() { errc <- n.Run(ctx) }()
	select {
	case <-log.entered:
	case err := <-errc:
		t.Fatalf("Run returned %v before it listed the sessions to resume", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the node never listed the sessions to resume")
	}
	return stop, errc
}

// Cancelling Run's context while the listing of the sessions to resume at an
// embedded start hangs (the log unreachable) ends Run: each listing attempt runs
// under Run's context. Before, it ran under context.Background() for up to a
// minute, inline in Run, which returned only after it.
func TestCancellingRunEndsAHangingResumeListing(t *testing.T) {
	var logs syncBuffer
	log := &stuckListingLog{hang: true}
	cancel, done := runStuckListing(t, log, &logs)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled: the resume listing held it")
	}
}

// A listing of the sessions to resume that finds a corrupt row, or meets a
// ClickHouse schema error, is not retried: no retry mends it. The resume is given
// up and logged at once. Before, it was retried for as long as the node ran.
func TestAResumeListingThatFailsForGoodIsNotRetried(t *testing.T) {
	var logs syncBuffer
	log := &stuckListingLog{err: fmt.Errorf("eventlog/clickhouse: sessions: %w: row 3", messages.ErrCorrupt)}
	cancel, done := runStuckListing(t, log, &logs)
	waitFor(t, 30*time.Second, "the resume is given up and logged", func() bool {
		return strings.Contains(logs.String(), `msg="resume sessions"`)
	})
	if n := strings.Count(logs.String(), "event log read failed; retrying"); n != 0 {
		t.Errorf("the corrupt listing was retried %d times; want none", n)
	}
	cancel()
	<-done
}

// pushListFails is a SQLite log whose listings of the A2A push streams fail with
// err; calls counts them.
type pushListFails struct {
	*sqlite.Log
	err   error
	calls atomic.Int32
}

func (l *pushListFails) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if f.Prefix == eventlog.A2APushStreamPrefix {
		l.calls.Add(1)
		return nil, l.err
	}
	return l.Log.Sessions(ctx, f)
}

// A node whose listing of the tasks with push configs meets an error no retry
// mends (ClickHouse: UNKNOWN_TABLE) tells so at once, as before listings were
// retried, instead of retrying it for as long as the node runs.
func TestA2APushListingThatFailsForGoodIsNotRetried(t *testing.T) {
	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &pushListFails{Log: base, err: fmt.Errorf("eventlog/clickhouse: sessions: %w", &clickhouse.Exception{Code: 60, Message: "Table troupe.events does not exist"})}
	scripted, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{{Content: "done"}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	n := nodetest.Start(t, node.Config{Log: log, NodeID: "a", Model: scripted, DataDir: t.TempDir(),
		A2A: &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_ = n.Handler() // builds the A2A server, which resumes the pushes
	waitFor(t, 30*time.Second, "the node tells the listing failed", func() bool {
		return strings.Contains(logs.String(), "the tasks with push configs cannot be listed")
	})
	if n := log.calls.Load(); n != 1 {
		t.Errorf("the listing was tried %d times; want once", n)
	}
}
