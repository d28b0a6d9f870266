package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// blipAtLog fails, once armed, the next read of a session from seq made outside
// a request: the hub's reading of an event too large for the bus.
type blipAtLog struct {
	eventlog.Log
	session string
	seq     uint64
	armed   atomic.Bool
}

func (l *blipAtLog) Read(ctx context.Context, session string, from uint64) ([]messages.Envelope, error) {
	if session == l.session && from == l.seq && ctx.Value(requestCtx{}) == nil && l.armed.CompareAndSwap(true, false) {
		return nil, errors.New("the log did not answer")
	}
	return l.Log.Read(ctx, session, from)
}

// The session feed of a node that reads troupe.events tells its clients a change
// was missed when the hub drops the bus copy of a task's end (too large for the
// bus, and its reading from the log failed once): a session row, or a resync.
// Without either, the dashboard shows the session running for good.
func TestSessionFeedIsToldOfATaskEndItCouldNotRead(t *testing.T) {
	c := newTestCluster(t, 0)
	session := fmt.Sprintf("feedgap-%d", time.Now().UnixNano())
	wide := func(cfg *node.Config) { cfg.Context.Window = 1_000_000 }
	runner, _ := clusterNode(t, c.k, c.group, c.log, "runner", 0, []tools.Tool{c.led.tool("runner")}, bigOnAsk{}, wide)
	// The task's events: 1 task.submitted, 2 model.requested, 3 model.responded
	// and 4 task.completed, both 2 MiB.
	log := &blipAtLog{Log: c.log, session: session, seq: 4}
	log.armed.Store(true)
	api, _ := clusterNode(t, c.k, c.group, log, "api", node.RoleTools, []tools.Tool{c.led.tool("api")}, bigOnAsk{}, wide)
	srv := httptest.NewUnstartedServer(api.Handler())
	srv.Config.BaseContext = func(net.Listener) context.Context { return context.WithValue(context.Background(), requestCtx{}, true) }
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	feed := openFeed(t, ctx, srv.URL, "")
	if _, err := runner.Submit(ctx, node.Task{Input: "answer big", SessionID: session}); err != nil {
		t.Fatal(err)
	}
	if row := nextRow(t, ctx, feed); row.ID != session || row.Status != messages.StatusRunning {
		t.Fatalf("first change: %+v", row)
	}
	waitFor(t, 60*time.Second, "the api node reading back the task's end", func() bool { return !log.armed.Load() })
	select {
	case ev, ok := <-feed:
		if !ok {
			return // the stream ended: the client lists again
		}
		if ev.name == "session" && (ev.row.ID != session || ev.row.Status != messages.StatusCompleted) {
			t.Fatalf("next change: %+v, want %s completed (or a resync)", ev.row, session)
		}
	case <-time.After(20 * time.Second):
		st, _, _ := runner.Status(ctx, session)
		t.Fatalf("the feed never said the task ended (its status: %s): no row, no resync", st.Status)
	}
}
