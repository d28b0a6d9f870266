package clickhouse_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/clickhouse"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// BenchmarkAppend measures events written per second by many concurrent appenders,
// each appending the 4 events of one session step per call (a session runs 25
// steps, then its appender starts a new one), against ClickHouse and, as a same-run
// baseline, against the embedded SQLite log. One operation is one Append call of 4
// events; the events/s metric is what matters. TROUPE_BENCH_APPENDERS sets the
// number of appenders (default 4096: a node with that many sessions writing).
//
//	TROUPE_TEST_CLICKHOUSE=127.0.0.1:9000 go test ./eventlog/clickhouse -run '^$' -bench Append -benchtime 200000x -count 3
func BenchmarkAppend(b *testing.B) {
	appenders := 4096
	if v := os.Getenv("TROUPE_BENCH_APPENDERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TROUPE_BENCH_APPENDERS=%q, want a positive number", v)
		}
		appenders = n
	}
	b.Run("clickhouse", func(b *testing.B) {
		l, _ := openLog(b, clickhouse.Config{})
		benchAppend(b, l, appenders)
		s := l.Stats()
		if s.Inserts > 0 {
			b.ReportMetric(float64(s.Events)/float64(s.Inserts), "events/insert")
		}
	})
	// As a node of a cluster appends: under a lease, checked before and after each
	// INSERT (eventlog.Fencing).
	b.Run("clickhouse-leased", func(b *testing.B) {
		l, _ := openLog(b, clickhouse.Config{})
		epoch, err := l.Own(testCtx(b, time.Minute), "bench", []int{0})
		if err != nil {
			b.Fatal(err)
		}
		benchAppend(b, leasedLog{l, eventlog.Lease{Partition: 0, Epoch: epoch}}, appenders)
		if s := l.Stats(); s.Inserts > 0 {
			b.ReportMetric(float64(s.Events)/float64(s.Inserts), "events/insert")
		}
	})
	b.Run("sqlite", func(b *testing.B) {
		ctx := testCtx(b, time.Minute)
		l, err := sqlite.Open(ctx, sqlite.Config{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := l.Close(); err != nil {
				b.Error(err)
			}
		})
		benchAppend(b, l, appenders)
	})
}

// leasedLog appends under a lease.
type leasedLog struct {
	*clickhouse.Log
	lease eventlog.Lease
}

func (l leasedLog) Append(ctx context.Context, events []messages.Envelope) error {
	return l.AppendLeased(ctx, l.lease, events)
}

// benchAppend runs b.N Append calls of 4 events spread over appenders goroutines.
func benchAppend(b *testing.B, l eventlog.Log, appenders int) {
	const stepsPerSession = 25
	var (
		next    atomic.Int64 // Append calls handed out
		payload int64        // payload bytes of the first appender, to report a mean size
		calls   int64
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// Payloads are encoded once: the benchmark measures the log, not JSON encoding.
	var templates [4]messages.Envelope
	for i := range templates {
		templates[i] = event(b, "template", uint64(i+1))
	}
	b.ResetTimer()
	start := time.Now()
	for a := range appenders {
		wg.Go(func() {
			var (
				session string
				seq     uint64
				batch   = make([]messages.Envelope, 4)
			)
			for step := 0; next.Add(1) <= int64(b.N); step++ {
				if step%stepsPerSession == 0 {
					session, seq = uuid.Must(uuid.NewV7()).String(), 0
				}
				for i := range batch {
					seq++
					e := templates[i]
					e.ID, e.SessionID, e.Seq = session+"/"+strconv.FormatUint(seq, 10), session, seq
					e.CorrelationID, e.CausationID = session+"/1", batch[max(i, 1)-1].ID
					e.TS = time.Now().UnixMicro()
					batch[i] = e
					if a == 0 {
						payload += int64(len(batch[i].Payload))
						calls++
					}
				}
				if err := l.Append(ctx, batch); err != nil {
					errOnce.Do(func() { failed = fmt.Errorf("appender %d: %w", a, err); cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(float64(4*b.N)/elapsed.Seconds(), "events/s")
	if calls > 0 {
		b.ReportMetric(float64(payload)/float64(calls), "payload-B/event")
	}
}

// BenchmarkReadNPages measures the read of a whole session in pages bounded by
// bytes, as replay export and the node's GET of a session's events read it: one
// operation reads the session (5,000 events) page after page. "uniform" holds
// events of 10 KB; "jump", a thousand events of a few bytes, then 10 KB ones.
//
//	TROUPE_TEST_CLICKHOUSE=127.0.0.1:9000 go test ./eventlog/clickhouse -run '^$' -bench ReadNPages -count 5
func BenchmarkReadNPages(b *testing.B) {
	const (
		events   = 5000
		size     = 10 << 10
		pageSize = 1 << 20
	)
	for _, c := range []struct {
		name  string
		small int // the events of a few bytes at the session's start
	}{{"uniform", 0}, {"jump", 1000}} {
		b.Run(c.name, func(b *testing.B) {
			l, _ := openLog(b, clickhouse.Config{})
			ctx := testCtx(b, 10*time.Minute)
			var batch []messages.Envelope
			for seq := uint64(1); seq <= events; seq++ {
				input := "s"
				if int(seq) > c.small {
					input = fmt.Sprintf("%0*d", size, seq)
				}
				e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: input})
				if err != nil {
					b.Fatal(err)
				}
				e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("read/%d", seq), "read", seq, int64(seq), "session"
				e.CorrelationID = "read/1"
				if batch = append(batch, e); len(batch) == 250 {
					if err := l.Append(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch = nil
				}
			}
			b.ResetTimer()
			var pages, bytes int
			for range b.N {
				for from := uint64(1); ; {
					page, err := l.ReadN(ctx, "read", from, 0, pageSize)
					if err != nil {
						b.Fatal(err)
					}
					if len(page) == 0 {
						break
					}
					pages++
					for _, e := range page {
						bytes += len(e.Payload)
					}
					from = page[len(page)-1].Seq + 1
				}
			}
			b.ReportMetric(float64(pages)/float64(b.N), "pages/op")
			b.SetBytes(int64(bytes / b.N))
		})
	}
}
