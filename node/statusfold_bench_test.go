package node

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// BenchmarkSessionStatusRead is GET /v1/sessions/{id} (the dashboard's session
// view; the read a client polling a session makes) of a session of about 20,000
// events on the SQLite log, read again and again as it stands.
//
//	go test ./node -run '^$' -bench SessionStatusRead -benchmem -count 5
func BenchmarkSessionStatusRead(b *testing.B) { benchmarkSessionStatusRead(b, 0) }

// BenchmarkSessionStatusReadGrowing is BenchmarkSessionStatusRead with a task of
// the session (22 events) appended to the log before each read, its append
// measured too.
//
//	go test ./node -run '^$' -bench SessionStatusReadGrowing -benchmem -count 5
func BenchmarkSessionStatusReadGrowing(b *testing.B) { benchmarkSessionStatusRead(b, 1) }

func benchmarkSessionStatusRead(b *testing.B, tasks int) {
	lg, err := sqlite.Open(context.Background(), sqlite.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer lg.Close()
	w := newHistoryWriter(b, lg, "long")
	w.tasks(1000, 5) // 22 events a task
	n, err := New(context.Background(), Config{Log: lg, DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	stop, err := n.Start(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	h := n.Handler()
	get := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sessions/long", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("GET /v1/sessions/long: %d %s", rec.Code, rec.Body)
		}
	}
	get()
	b.ResetTimer()
	for b.Loop() {
		if tasks > 0 {
			w.tasks(tasks, 5)
		}
		get()
	}
}
