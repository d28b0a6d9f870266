package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/tools"
)

// The task every scenario runs, and the answer it must end with.
const (
	taskInput  = "What is 12 * (7 + 5)?"
	taskOutput = "144"
)

// script is the model of every node: step 1 calls the calculator, step 2 answers.
// llm.Scripted picks the response by the call's step, so concurrent sessions share it.
func script() (*llm.Scripted, error) {
	return llm.NewScripted(llm.Script{Name: "bench", Steps: []llm.ScriptStep{
		{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "calculator", Arguments: `{"expression":"12 * (7 + 5)"}`}}},
		{Content: taskOutput},
	}})
}

// nodeConfig is the configuration of every node; log and bus vary by scenario.
func nodeConfig() (node.Config, error) {
	m, err := script()
	if err != nil {
		return node.Config{}, err
	}
	return node.Config{
		Model:  m,
		Tools:  []tools.Tool{tools.Calculator{}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil
}

// taskFunc runs one task in a new session to its end and returns its latency.
type taskFunc func(ctx context.Context, sessionID string) (time.Duration, error)

type result struct {
	name      string // scenario, and round when there are several
	scenario  string
	round     int
	elapsed   time.Duration
	latencies []time.Duration // sorted
	notes     []string
	err       error
}

func (r result) rate() float64 { return float64(len(r.latencies)) / r.elapsed.Seconds() }

// percentile returns the nearest-rank percentile p (0 < p <= 1) of the latencies.
func (r result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(r.latencies)))) - 1
	return r.latencies[max(i, 0)]
}

// drive runs n tasks, at most c at a time, in sessions prefix-000000 and on, each
// bounded by timeout. It returns the wall time from the first start to the last end
// and every latency, sorted; any failed task makes it return an error (with a
// count and the first few errors).
func drive(ctx context.Context, run taskFunc, prefix string, n, c int, timeout time.Duration) (time.Duration, []time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	failed := 0
	var wg sync.WaitGroup
	start := time.Now()
	for range min(c, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				tctx, cancel := context.WithTimeout(ctx, timeout)
				d, err := run(tctx, fmt.Sprintf("%s-%06d", prefix, i))
				cancel()
				if err != nil {
					mu.Lock()
					failed++
					if len(errs) < 5 {
						errs = append(errs, err)
					}
					mu.Unlock()
					continue
				}
				lat[i] = d
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	if failed > 0 {
		return 0, nil, fmt.Errorf("%d of %d tasks failed; first errors: %w", failed, n, errors.Join(errs...))
	}
	slices.Sort(lat)
	return elapsed, lat, nil
}

// measure warms up, then runs the measured tasks (under a CPU profile if asked for).
func measure(ctx context.Context, o options, label string, run taskFunc, prefix string) (result, error) {
	if o.warmup > 0 {
		if _, _, err := drive(ctx, run, prefix+"-warm", o.warmup, o.concurrency, o.timeout); err != nil {
			return result{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s-%s.pprof", o.cpuProfile, label))
		if err != nil {
			return result{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return result{}, err
		}
		defer pprof.StopCPUProfile()
	}
	o.requests.take(1) // setup's and warm-up's
	elapsed, lat, err := drive(ctx, run, prefix+"-run", o.tasks, o.concurrency, o.timeout)
	if err != nil {
		return result{}, err
	}
	r := result{elapsed: elapsed, latencies: lat}
	if note := o.requests.take(o.tasks); note != "" {
		r.notes = append(r.notes, note)
	}
	return r, nil
}

// checkLog reads every session of the log and checks that there are want of them,
// each completed after the two model calls of one task: a task run twice, lost, or
// not finished shows here even if its result looked right.
func checkLog(ctx context.Context, log eventlog.Log, want int) (string, error) {
	infos, err := log.Sessions(ctx, eventlog.Filter{SessionsOnly: true}) // not the agents' configurations' streams
	if err != nil {
		return "", fmt.Errorf("list sessions: %w", err)
	}
	byStatus := map[string]int{}
	var bad []string
	for _, s := range infos {
		byStatus[s.Status]++
		if (s.Status != messages.StatusCompleted || s.Steps != 2) && len(bad) < 5 {
			bad = append(bad, fmt.Sprintf("%s: %s after %d model calls", s.ID, s.Status, s.Steps))
		}
	}
	summary := fmt.Sprintf("log: %d sessions (%v)", len(infos), byStatus)
	if sl, ok := log.(interface{ Stats() sqlite.Stats }); ok {
		// The whole run's (warm-up included): how many appends group commit
		// coalesced into each transaction.
		st := sl.Stats()
		summary += fmt.Sprintf("; %d appends in %d transactions (%.1f each)", st.Appends, st.Transactions, float64(st.Appends)/float64(max(st.Transactions, 1)))
	}
	if len(infos) != want || len(bad) > 0 {
		return summary, fmt.Errorf("%s, want %d completed after 2 model calls each; e.g. %s", summary, want, strings.Join(bad, "; "))
	}
	return summary, nil
}

// handlerStats summarises a node's bus handler metrics: messages handled and mean
// time per message, by handler, plus retries, poisoned messages and duplicates.
func handlerStats(n *node.Node) string {
	mfs, err := n.Metrics().Registry.Gather()
	if err != nil {
		return "metrics: " + err.Error()
	}
	var parts []string
	for _, mf := range mfs {
		name := strings.TrimPrefix(mf.GetName(), "troupe_bus_")
		for _, m := range mf.GetMetric() {
			labels := ""
			for _, l := range m.GetLabel() {
				labels += "," + l.GetValue()
			}
			labels = strings.TrimPrefix(labels, ",")
			if h := m.GetHistogram(); h != nil {
				if c := h.GetSampleCount(); c > 0 {
					parts = append(parts, fmt.Sprintf("%s[%s]=%d mean %s", name, labels, c, fmtDur(time.Duration(h.GetSampleSum()/float64(c)*float64(time.Second)))))
				}
			} else if c := m.GetCounter(); c != nil && c.GetValue() > 0 {
				parts = append(parts, fmt.Sprintf("%s[%s]=%.0f", name, labels, c.GetValue()))
			}
		}
	}
	return strings.Join(parts, " ")
}
