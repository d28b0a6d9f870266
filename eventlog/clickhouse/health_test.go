package clickhouse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/messages"
)

// lockedBuf is a bytes.Buffer safe for the log's goroutines.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// records returns the JSON log records written so far.
func (b *lockedBuf) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// TestWritableFollowsAnOutage: eventlog.Health says whether the ClickHouse log's
// writes go through. While they do, Writable sends nothing (table write_probes
// stays empty); once the server cannot be reached it says why, and keeps saying
// so; once the server is back it says nil again with no append in between (its
// own probe learns it), leaving no row readers see. The writer logs the outage
// once as it starts and once as it ends, where it logged a warning at every
// attempt, and Append goes through again. Before, the log had no Writable: a
// node's /healthz said ok throughout.
func TestWritableFollowsAnOutage(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	logs := &lockedBuf{}
	l, db := openLog(t, clickhouse.Config{Addr: []string{p.addr}, RetryInitialBackoff: 20 * time.Millisecond,
		RetryMaxBackoff: 200 * time.Millisecond, QueryTimeout: 5 * time.Second, DialTimeout: time.Second,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	h, ok := any(l).(eventlog.Health)
	if !ok {
		t.Fatal("the ClickHouse log does not implement eventlog.Health")
	}
	ctx := testCtx(t, 2*time.Minute)
	conn := rawConn(t, addr)
	probes := func() uint64 {
		t.Helper()
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+db+".write_probes").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := l.Append(ctx, []messages.Envelope{event(t, "s", 1)}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := h.Writable(ctx); err != nil {
			t.Fatalf("Writable after a write went through: %v", err)
		}
	}
	if n := probes(); n != 0 {
		t.Errorf("Writable of a log whose writes go through wrote %d probes", n)
	}

	p.down()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := l.Append(short, []messages.Envelope{event(t, "s", 2)})
	cancel()
	if err == nil {
		t.Fatal("Append with the server unreachable went through")
	}
	if r := l.Stats().Retries; r < 3 {
		t.Fatalf("the writer retried %d times in 3 s, want several", r)
	}
	for range 3 {
		if err := h.Writable(ctx); err == nil {
			t.Fatal("Writable with the server unreachable: nil")
		}
	}
	time.Sleep(1100 * time.Millisecond) // past the probe interval: this one probes
	if err := h.Writable(ctx); err == nil || !strings.Contains(err.Error(), "probe") {
		t.Fatalf("Writable with the server unreachable, probing: %v; want the probe's failure", err)
	}

	p.up()
	deadline := time.Now().Add(20 * time.Second)
	for h.Writable(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Writable once the server was back, with no append: %v; want nil", h.Writable(ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := l.Append(ctx, []messages.Envelope{event(t, "s", 2)}); err != nil {
		t.Fatalf("Append once the server was back: %v", err)
	}
	if events, err := l.Read(ctx, "s", 1); err != nil || len(events) != 2 {
		t.Fatalf("read %d events (%v), want 2: the probe must leave the log as it was", len(events), err)
	}
	if n := probes(); n < 1 {
		t.Errorf("write_probes holds %d rows after the server came back with no append, want the probe's", n)
	}
	if err := conn.Exec(ctx, "OPTIMIZE TABLE "+db+".write_probes FINAL"); err != nil {
		t.Fatal(err)
	}
	if n := probes(); n != 1 {
		t.Errorf("write_probes holds %d rows once merged, want 1: it must not grow with the probes", n)
	}

	var starts, ends, attempts int
	for _, rec := range logs.records(t) {
		msg, _ := rec["msg"].(string)
		switch {
		case strings.HasPrefix(msg, "eventlog/clickhouse: writes fail"):
			starts++
			if e, _ := rec["err"].(string); !strings.Contains(e, p.addr) {
				t.Errorf("the outage's first line does not name its cause: %v", rec)
			}
		case strings.HasPrefix(msg, "eventlog/clickhouse: writes go through again"):
			ends++
			if _, ok := rec["outage"]; !ok {
				t.Errorf("the outage's end does not say how long it lasted: %v", rec)
			}
		case strings.HasPrefix(msg, "eventlog/clickhouse: write"):
			attempts++
		}
	}
	if starts != 1 || ends != 1 || attempts != 0 {
		t.Errorf("%d lines for the outage's start, %d for its end, %d for the writer's attempts (%d retries); want 1, 1, 0:\n%v",
			starts, ends, attempts, l.Stats().Retries, logs.records(t))
	}
}

// TestWritableClosed: a log whose writes failed and that is closed says so.
func TestWritableClosed(t *testing.T) {
	addr := serverAddr(t)
	p := newProxy(t, addr[0])
	l, _ := openLog(t, clickhouse.Config{Addr: []string{p.addr}, RetryInitialBackoff: 20 * time.Millisecond,
		RetryMaxBackoff: 200 * time.Millisecond, QueryTimeout: 5 * time.Second, DialTimeout: time.Second, CloseTimeout: 500 * time.Millisecond})
	h, ok := any(l).(eventlog.Health)
	if !ok {
		t.Fatal("the ClickHouse log does not implement eventlog.Health")
	}
	ctx := testCtx(t, time.Minute)
	p.down()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Append(short, []messages.Envelope{event(t, "s", 1)}); err == nil {
		t.Fatal("Append with the server unreachable went through")
	}
	_ = l.Close()
	if err := h.Writable(ctx); !errors.Is(err, eventlog.ErrClosed) {
		t.Fatalf("Writable of a closed log whose writes failed: %v; want ErrClosed", err)
	}
}
