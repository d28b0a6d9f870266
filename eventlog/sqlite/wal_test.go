package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// TestWALShrinksWhenIdle writes a burst of large events from concurrent callers,
// which grows the -wal file to several MiB, and checks that once the log idles
// the file shrinks again, where it used to keep its peak size for good.
func TestWALShrinksWhenIdle(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "events.db-wal")
	l := open(t, sqlite.Config{Dir: dir})
	ctx := testCtx(t)
	result := strings.Repeat("x", 8<<10)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		peak int64
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session := fmt.Sprintf("burst-%d", w)
			for seq := uint64(1); seq <= 400; seq++ {
				e, err := messages.NewEnvelope(&messages.ToolCallCompleted{Key: "k", CallID: "c", Tool: "fetch", Result: result})
				if err != nil {
					t.Error(err)
					return
				}
				e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, seq), session, seq, int64(seq), "tools"
				if err := l.Append(ctx, []messages.Envelope{e}); err != nil {
					t.Error(err)
					return
				}
				if fi, err := os.Stat(wal); err == nil {
					mu.Lock()
					peak = max(peak, fi.Size())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if peak < 4<<20 {
		t.Fatalf("the WAL peaked at %d bytes during the burst, want the burst to grow it past 4 MiB", peak)
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard, not a timing claim
	for {
		fi, err := os.Stat(wal)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 1<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WAL is %d bytes long after the log idled (it peaked at %d), want it shrunk below 1 MiB", fi.Size(), peak)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, err := l.Read(ctx, "burst-3", 0)
	if err != nil || len(got) != 400 {
		t.Fatalf("Read = %d events, %v; want 400", len(got), err)
	}
}
