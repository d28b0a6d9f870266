// Command memwrites measures the writes per second one memory namespace takes from
// many concurrent writers (the memory tool of many sessions sharing a namespace)
// over a log whose Append is slow: the embedded SQLite log, each Append delayed by
// -delay (default 50 ms, about a ClickHouse cluster's insert). Each writer adds
// one memory per call, under a key of its own, for -for; the program prints the
// writes, the Appends and the writes per second.
//
//	go run ./bench/memwrites -writers 32 -for 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/vectorstore"
)

// slowLog delays every Append by delay, and counts them.
type slowLog struct {
	eventlog.Log
	delay   time.Duration
	appends atomic.Int64
}

func (l *slowLog) Append(ctx context.Context, events []messages.Envelope) error {
	l.appends.Add(1)
	time.Sleep(l.delay)
	return l.Log.Append(ctx, events)
}

func main() {
	writers := flag.Int("writers", 32, "concurrent writers")
	dur := flag.Duration("for", 10*time.Second, "how long to write")
	delay := flag.Duration("delay", 50*time.Millisecond, "added to each Append")
	flag.Parse()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "memwrites-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sl, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer sl.Close()
	vs, err := vectorstore.Open(vectorstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer vs.Close()
	l := &slowLog{Log: sl, delay: *delay}
	m, err := memory.Open(memory.Config{Log: l, Vectors: vs})
	if err != nil {
		log.Fatal(err)
	}
	ns, err := m.Namespace(ctx, "shared")
	if err != nil {
		log.Fatal(err)
	}
	var writes, failed atomic.Int64
	start := time.Now()
	stop := start.Add(*dur)
	var wg sync.WaitGroup
	for w := range *writers {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				_, err := ns.Add(ctx, fmt.Sprintf("w%d-%d", w, i), []memory.AddRequest{{Tier: memory.Episodic,
					Content: fmt.Sprintf("Writer %d noted event %d of the run.", w, i)}})
				if err != nil {
					failed.Add(1)
					continue
				}
				writes.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("writers=%d delay=%s: %d writes (%d failed) in %d Appends over %.1fs: %.1f writes/s\n",
		*writers, *delay, writes.Load(), failed.Load(), l.appends.Load(), el.Seconds(), float64(writes.Load())/el.Seconds())
}
