package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// TestOutage stops the real ClickHouse server for a while (TROUPE_TEST_CLICKHOUSE_OUTAGE,
// default 60s) while appenders keep appending the events of many sessions, then
// starts it again. The appenders behave like the event sink: each Append has a
// deadline, and a batch whose Append failed is appended again until it succeeds.
// In the end every appended event is stored exactly once: per session, the seqs
// 1…n, n distinct IDs, nothing else; Read and Sessions agree.
//
// It runs only with TROUPE_TEST_CLICKHOUSE_CONTROL=1, since it stops the server
// with deploy/clickhouse.sh (which must manage the server at TROUPE_TEST_CLICKHOUSE;
// TROUPE_DEPLOY_RUN is passed through). Run it on its own, not beside other
// packages' tests that use the same server (go test ./... runs packages in
// parallel), for example after the main test run:
//
//	TROUPE_TEST_CLICKHOUSE_CONTROL=1 go test ./eventlog/clickhouse -run '^TestOutage$' -count=1
func TestOutage(t *testing.T) {
	addr := serverAddr(t)
	if os.Getenv(envControl) != "1" {
		t.Skipf("%s is not 1: this test stops and starts the ClickHouse server with deploy/clickhouse.sh", envControl)
	}
	outage := time.Minute
	if v := os.Getenv(envOutage); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q, want a duration such as 10s", envOutage, v)
		}
		outage = d
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "clickhouse.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("the outage test needs deploy/clickhouse.sh: %v", err)
	}
	server := func(cmds ...string) {
		t.Helper()
		for _, c := range cmds {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			out, err := exec.CommandContext(ctx, "bash", script, c).CombinedOutput()
			cancel()
			t.Logf("deploy/clickhouse.sh %s: %s", c, out)
			if err != nil {
				t.Fatalf("deploy/clickhouse.sh %s: %v", c, err)
			}
		}
	}
	// Whatever happens, leave the server running for the tests after this one.
	t.Cleanup(func() { server("start", "wait") })

	l, db := openLog(t, clickhouse.Config{RetryInitialBackoff: 50 * time.Millisecond, RetryMaxBackoff: 2 * time.Second,
		QueryTimeout: 10 * time.Second, DialTimeout: 2 * time.Second})
	const sessions = 64
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		appended [sessions]uint64 // per session: the seqs 1…n whose Append succeeded
		retried  atomic.Int64     // batches appended again after a failed Append
		ctx      = testCtx(t, outage+5*time.Minute)
	)
	for s := range sessions {
		wg.Go(func() {
			id := fmt.Sprintf("outage-%02d", s)
			for seq := uint64(1); !stop.Load(); seq += 4 {
				batch := []messages.Envelope{event(t, id, seq), event(t, id, seq+1), event(t, id, seq+2), event(t, id, seq+3)}
				for {
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					err := l.Append(actx, batch)
					cancel()
					if err == nil {
						break
					}
					if ctx.Err() != nil || !(errors.Is(err, context.DeadlineExceeded)) {
						t.Errorf("session %s: Append(seqs %d…%d): %v", id, seq, seq+3, err)
						return
					}
					retried.Add(1) // like the sink: not committed, so delivered again
				}
				appended[s] = seq + 3
				time.Sleep(5 * time.Millisecond) // a session step takes a while
			}
		})
	}
	pause(t, 2*time.Second)
	before := l.Stats()
	server("stop")
	t.Logf("server stopped for %s; %d events appended before", outage, before.Events)
	pause(t, outage)
	during := l.Stats()
	server("start", "wait")
	pause(t, 3*time.Second)
	stop.Store(true)
	waitGroup(t, &wg, 2*time.Minute)
	after := l.Stats()
	t.Logf("stats before the outage %+v, at its end %+v, after %+v; %d batches appended again after a failed Append",
		before, during, after, retried.Load())
	if during.Retries == before.Retries {
		t.Errorf("the writer did not retry during the outage: %+v", during)
	}
	if after.Events <= during.Events {
		t.Errorf("nothing was written after the outage: %+v", after)
	}

	// Exactly once, counted by ClickHouse itself.
	conn := rawConn(t, addr)
	var total uint64
	for s := range sessions {
		id := fmt.Sprintf("outage-%02d", s)
		var rows, ids, seqs, minSeq, maxSeq uint64
		if err := conn.QueryRow(ctx, `SELECT count(), uniqExact(id), uniqExact(seq), min(seq), max(seq)
			FROM `+db+`.events FINAL WHERE session_id = ?`, id).Scan(&rows, &ids, &seqs, &minSeq, &maxSeq); err != nil {
			t.Fatal(err)
		}
		// Every batch was appended until it succeeded, and none after the last success.
		n := appended[s]
		if rows != n || ids != n || seqs != n || minSeq != 1 || maxSeq != n {
			t.Errorf("session %s: %d rows, %d ids, %d seqs, seqs %d…%d; appended 1…%d", id, rows, ids, seqs, minSeq, maxSeq, n)
		}
		total += rows
		got, err := l.Read(ctx, id, 0)
		if err != nil || uint64(len(got)) != rows {
			t.Fatalf("Read(%s) = %d events, %v; want %d", id, len(got), err, rows)
		}
		for i, e := range got {
			if want := event(t, id, uint64(i+1)); !reflect.DeepEqual(e, want) {
				t.Fatalf("Read(%s)[%d] = %+v, want %+v", id, i, e, want)
			}
		}
	}
	infos, err := l.Sessions(ctx, eventlog.Filter{})
	if err != nil || len(infos) != sessions {
		t.Fatalf("Sessions = %d, %v; want %d", len(infos), err, sessions)
	}
	var listed uint64
	for _, info := range infos {
		listed += uint64(info.Events)
	}
	if listed != total {
		t.Errorf("Sessions counts %d events, the table holds %d", listed, total)
	}
	var raw uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".events").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events of %d sessions stored exactly once (%d rows before merges collapse rows written twice)", total, sessions, raw)
}

// pause waits d, or fails the test if its context ends first.
func pause(t *testing.T, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
		t.Fatal("test ended while pausing")
	}
}
