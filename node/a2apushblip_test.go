package node_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/troupe-run/troupe/a2a"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// pushListBlip is a SQLite log whose listings of the A2A push streams fail their
// next left times, as ClickHouse does while it restarts.
type pushListBlip struct {
	*sqlite.Log
	left atomic.Int32
}

func (l *pushListBlip) Sessions(ctx context.Context, f eventlog.Filter) ([]eventlog.SessionInfo, error) {
	if f.Prefix == eventlog.A2APushStreamPrefix && l.left.Add(-1) >= 0 {
		return nil, errors.New("clickhouse: dial tcp 127.0.0.1:9000: connect: connection refused")
	}
	return l.Log.Sessions(ctx, f)
}

// A node restarted while its log blips (its listing of the tasks with push
// configs fails a few times) retries the listing, and follows the resumed task:
// its webhook hears of its end. Before, the failed listing was logged and the
// task followed by nobody: the webhook never heard that it ended.
func TestA2APushFollowsAResumedTaskAfterAListingBlip(t *testing.T) {
	const answer = "resumed and pushed"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hook, hookURL := newPushHook(t)

	held := newHeldTool()
	cfg := heldConfig(t, held, answer)
	cfg.DataDir = dir
	cfg.A2A = &node.A2AConfig{PushAllow: []string{"127.0.0.1"}}
	cfg.HandoffGrace = heldCallGrace // the held call never answers on the first node
	url, stop := a2aNodeToStop(t, cfg)
	client, _ := a2aClient(t, url, a2a.CardPath)
	blocking := false
	if _, err := client.SendMessage(ctx, &sdk.MessageSendParams{Message: userMessage("hold on"),
		Config: &sdk.MessageSendConfig{Blocking: &blocking, PushConfig: &sdk.PushConfig{ID: "hook", URL: hookURL + "/resumed"}}}); err != nil {
		t.Fatal(err)
	}
	held.waitStarted(t, "before the restart")
	stop()

	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &pushListBlip{Log: base}
	log.left.Store(3)
	again := newHeldTool()
	cfg2 := heldConfig(t, again, answer)
	cfg2.DataDir, cfg2.A2A, cfg2.Log = dir, cfg.A2A, log
	second := nodetest.Start(t, cfg2)
	api := httptest.NewServer(second.Handler())
	defer api.Close()
	again.waitStarted(t, "again by the restarted node")
	close(again.release)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		states, _ := hook.got("/resumed")
		if len(states) > 0 && states[len(states)-1] == sdk.TaskStateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook did not hear of the resumed task's end within 30 s: it got %v", states)
		}
	}
}
