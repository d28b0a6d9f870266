package node_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// failingReads is a log whose reads fail while fail is set.
type failingReads struct {
	eventlog.Log
	fail atomic.Bool
}

func (l *failingReads) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if l.fail.Load() {
		return nil, errors.New("the log cannot be read")
	}
	return l.Log.Read(ctx, session, from)
}

// A cancellation whose session cannot be read (the log is down) is answered 503,
// as an approval is, not 404 "no session": a client told the session does not
// exist stops trying, and the task runs on.
func TestCancelWhenTheLogCannotBeReadIs503(t *testing.T) {
	log := &failingReads{Log: sharedLog(t)}
	n := nodetest.Start(t, node.Config{Log: log})
	nodetest.Run(t, n, "c-read", "hello")
	api := httptest.NewServer(n.Handler())
	t.Cleanup(api.Close)
	log.fail.Store(true)
	defer log.fail.Store(false)
	if code, msg := postJSON(t, api.URL+"/v1/sessions/c-read/cancel", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("cancel while the log cannot be read: %d %q, want 503", code, msg)
	}
}
