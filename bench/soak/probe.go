package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// snapshot is the child's memory at one phase. A metric the child does not expose
// is NaN.
type snapshot struct {
	phase        string
	tasks        int
	rssKB, hwmKB int64
	heapInuse    float64 // bytes, after a GC when the child is the -serve one
	heapAlloc    float64 // bytes of live objects (and, without a GC, garbage)
	heapObjects  float64
	goroutines   float64
	sessions     float64
	evicted      float64 // troupe_sessions_evicted_total
	dedupeIDs    float64 // troupe_bus_dedupe_ids
	answers      float64 // troupe_effects_answers_kept
}

func (s snapshot) String() string {
	return fmt.Sprintf("%-16s tasks %7d  RSS %6.1f MiB (peak %6.1f)  heap in use %s MiB  allocated %s MiB  objects %s  goroutines %s  session actors %s (evicted %s)  dedupe IDs %s  effect answers %s",
		s.phase, s.tasks, mib(s.rssKB*1024), mib(s.hwmKB*1024),
		orNA(s.heapInuse, func(v float64) string { return fmt.Sprintf("%.1f", mib(int64(v))) }),
		orNA(s.heapAlloc, func(v float64) string { return fmt.Sprintf("%.1f", mib(int64(v))) }),
		orNA(s.heapObjects, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		orNA(s.goroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		orNA(s.sessions, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		orNA(s.evicted, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		orNA(s.dedupeIDs, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
		orNA(s.answers, func(v float64) string { return fmt.Sprintf("%.0f", v) }))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func orNA(v float64, f func(float64) string) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return f(v)
}

// snapshot reads the child's resident set first (so that the GC a heap profile runs
// does not change it), then, with gc, its heap after a GC: the -serve child's
// /debug/pprof/heap?gc=1 (written to PREFIX-<phase>.pprof with -heapprofile) and
// /debug/vars; a node binary's go_memstats_heap_inuse_bytes on /metrics, without a GC.
func (c *child) snapshot(ctx context.Context, phase string, tasks int, gc bool, profile string) (snapshot, error) {
	s := snapshot{phase: phase, tasks: tasks, heapInuse: math.NaN(), heapAlloc: math.NaN(), heapObjects: math.NaN(), goroutines: math.NaN(), sessions: math.NaN(), evicted: math.NaN(),
		dedupeIDs: math.NaN(), answers: math.NaN()}
	var err error
	if s.rssKB, s.hwmKB, err = procStatus(c.cmd.Process.Pid); err != nil {
		return s, err
	}
	metrics, err := c.metrics(ctx)
	if err != nil {
		return s, err
	}
	if v, ok := metrics["go_goroutines"]; ok {
		s.goroutines = v
	}
	if v, ok := metrics["troupe_sessions_live"]; ok {
		s.sessions = v
	}
	if v, ok := metrics["troupe_sessions_evicted_total"]; ok {
		s.evicted = v
	}
	if v, ok := metrics["troupe_bus_dedupe_ids"]; ok {
		s.dedupeIDs = v
	}
	if v, ok := metrics["troupe_effects_answers_kept"]; ok {
		s.answers = v
	}
	if !c.builtin {
		if v, ok := metrics["go_memstats_heap_inuse_bytes"]; ok {
			s.heapInuse = v
		}
		if v, ok := metrics["go_memstats_heap_alloc_bytes"]; ok {
			s.heapAlloc = v
		}
		if v, ok := metrics["go_memstats_heap_objects"]; ok {
			s.heapObjects = v
		}
		return s, nil
	}
	if gc {
		prof, err := c.get(ctx, "/debug/pprof/heap?gc=1")
		if err != nil {
			return s, err
		}
		if profile != "" {
			if err := os.WriteFile(fmt.Sprintf("%s-%s.pprof", profile, phase), prof, 0o644); err != nil {
				return s, err
			}
		}
	}
	b, err := c.get(ctx, "/debug/vars")
	if err != nil {
		return s, err
	}
	var vars struct {
		Memstats struct{ HeapInuse, HeapAlloc, HeapObjects uint64 } `json:"memstats"`
	}
	if err := json.Unmarshal(b, &vars); err != nil {
		return s, fmt.Errorf("/debug/vars: %w", err)
	}
	s.heapInuse, s.heapAlloc, s.heapObjects = float64(vars.Memstats.HeapInuse), float64(vars.Memstats.HeapAlloc), float64(vars.Memstats.HeapObjects)
	return s, nil
}

// procStatus reads VmRSS and VmHWM (kB) of a process.
func procStatus(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
	}
	return rss, hwm, nil
}

// metrics reads the unlabelled samples of the child's /metrics.
func (c *child) metrics(ctx context.Context) (map[string]float64, error) {
	b, err := c.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// waitPassivated polls troupe_sessions_live until it is 0, at most wait; a child
// without that metric is given the whole wait.
func (c *child) waitPassivated(ctx context.Context, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		m, err := c.metrics(ctx)
		if err != nil {
			return 0, err
		}
		v, ok := m["troupe_sessions_live"]
		if ok && v == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > wait {
			if !ok {
				return time.Since(start), nil
			}
			return 0, fmt.Errorf("%v session actors still live after %s", v, wait)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
