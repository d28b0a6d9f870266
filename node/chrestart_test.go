//go:build chrestart

package node_test

// A check against a real ClickHouse that this test stops and starts (not run by
// default: it needs deploy/clickhouse.sh and a server of its own):
//
//	TROUPE_DEPLOY_RUN=/tmp/x-run CLICKHOUSE_PORT=9100 CLICKHOUSE_HTTP_PORT=8223 bash deploy/clickhouse.sh start
//	TROUPE_TEST_CLICKHOUSE=127.0.0.1:9100 TROUPE_DEPLOY_RUN=/tmp/x-run CLICKHOUSE_PORT=9100 CLICKHOUSE_HTTP_PORT=8223 \
//	  go test ./node -tags chrestart -run TestASessionRidesOutAClickHouseRestart -count=1 -v

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/clickhouse/chtest"
	"github.com/troupe-run/troupe/messages"
)

// restartAfter is how many epoch reads fail before the server starts again: more
// than the session actor's supervisor restarts (5 in 10 s).
const restartAfter = 7

// restartingLog is a ClickHouse log that stops its server (deploy/clickhouse.sh
// stop) the first time a session's activation reads its partition's epoch once
// armed, and starts it again after the read failed restartAfter times.
type restartingLog struct {
	*clickhouse.Log
	t         *testing.T
	mu        sync.Mutex
	armed     bool
	failed    int
	restarted chan struct{}
}

func (l *restartingLog) CurrentEpoch(ctx context.Context, partition int) (uint64, error) {
	l.mu.Lock()
	if l.armed {
		l.armed = false
		l.script("stop")
	}
	l.mu.Unlock()
	e, err := l.Log.CurrentEpoch(ctx, partition)
	if err != nil {
		l.mu.Lock()
		l.failed++
		if l.failed == restartAfter {
			go func() { l.script("start"); close(l.restarted) }()
		}
		l.mu.Unlock()
		l.t.Logf("CurrentEpoch with the server down: %v", err)
	}
	return e, err
}

func (l *restartingLog) script(cmd string) {
	out, err := exec.Command("bash", "../deploy/clickhouse.sh", cmd).CombinedOutput()
	l.t.Logf("deploy/clickhouse.sh %s: %v\n%s", cmd, err, out)
}

func TestASessionRidesOutAClickHouseRestart(t *testing.T) {
	addr := os.Getenv("TROUPE_TEST_CLICKHOUSE")
	if addr == "" {
		t.Skip("TROUPE_TEST_CLICKHOUSE is not set")
	}
	db := chtest.Database(t, addr, "troupe_chrestart_")
	base, err := clickhouse.Open(context.Background(), clickhouse.Config{Addr: clickhouse.SplitAddr(addr), Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	log := &restartingLog{Log: base, t: t, restarted: make(chan struct{})}
	n, open := startGatedShardedNode(t, log)
	n.Revoked()
	log.mu.Lock()
	log.armed = true
	log.mu.Unlock()
	t.Cleanup(func() {
		select {
		case <-log.restarted:
		default:
			log.script("start") // the session gave up before the server was started again
		}
	})
	n.Assigned([]int{0}, 1) // resumes the session, whose epoch check stops the server
	select {
	case <-log.restarted:
	case <-time.After(time.Minute):
		t.Fatal("the server was not started again: the session stopped reading its epoch (given up?)")
	}
	open()
	waitFor(t, time.Minute, "the resumed session completes its task", func() bool {
		st, ok, err := n.Status(context.Background(), "s-1")
		return err == nil && ok && st.Status == messages.StatusCompleted
	})
}
