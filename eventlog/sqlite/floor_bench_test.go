//go:build unix

package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog/sqlite"
)

// BenchmarkRowFloor is what SQLite itself (modernc.org/sqlite through
// database/sql, prepared statements) costs per event row of the log's own schema,
// made by Open, with none of the writer's work: 64 rows a transaction, inserted
// k at a time by one statement, the session summaries left alone. An op is a row;
// "cpu-ns/row" is the process's CPU time per row. Set beside BenchmarkAppendTasks'
// cpu-ns/event, it says how much of an append is the writer's and how much is the
// row's, whatever the statement's size.
func BenchmarkRowFloor(b *testing.B) {
	for _, k := range []int{1, 2, 4, 16, 64} {
		b.Run(fmt.Sprintf("rows=%d", k), func(b *testing.B) { benchmarkRowFloor(b, k) })
	}
}

func benchmarkRowFloor(b *testing.B, k int) {
	dir := b.TempDir()
	l := open(b, sqlite.Config{Dir: dir})
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "events.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	row := "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	insert, err := db.Prepare(`INSERT OR IGNORE INTO events (session_id, seq, id, type, version, causation_id, correlation_id, ts, actor, payload, epoch, epoch_start)
		VALUES ` + strings.Repeat(row+", ", k-1) + row)
	if err != nil {
		b.Fatal(err)
	}
	defer insert.Close()
	payload := []byte(`{"key":"t/2","model":"offline","message":{"role":"assistant","content":"144"},"latency_us":812}`)
	const perTx = 64
	args := make([]any, 0, 12*k)
	var before syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &before); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for n < b.N {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		s := tx.Stmt(insert)
		for j := 0; j < perTx; j += k {
			args = args[:0]
			for range k {
				n++
				session := fmt.Sprintf("bench-%d", n/8)
				seq := int64(n%8 + 1)
				args = append(args, session, seq, fmt.Sprintf("%s/%d", session, seq), "model.responded", int64(1), session+"/1",
					session+"/1", int64(n), "session", payload, int64(0), int64(1))
			}
			if _, err := s.ExecContext(ctx, args...); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &after); err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/row")
}
