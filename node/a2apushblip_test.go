package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
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
	hook, _, a2aCfg := pushedTaskCutByAStop(ctx, t, dir, answer)

	base, err := sqlite.Open(context.Background(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &pushListBlip{Log: base}
	log.left.Store(3)
	resumedAndPushedToItsEnd(t, dir, answer, a2aCfg, log, hook)
}
