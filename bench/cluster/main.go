// Command cluster measures one-step tasks (the model calls the calculator, then
// answers) through a Troupe node on the embedded bus and on Kafka, in one run, so that
// the figures can be compared with each other:
//
//	embedded  one node on the in-process GoChannel bus (the baseline)
//	kafka-1   one node on Kafka
//	kafka-2   two nodes on Kafka in one consumer group, sharing one event log
//
// Kafka is kfake (franz-go's in-process Kafka-protocol broker) unless -kafka or
// TROUPE_KAFKA names a broker. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

type options struct {
	tasks, concurrency, warmup, partitions, rounds int
	timeout                                        time.Duration
	scenarios                                      []string
	kafka                                          string
	cpuProfile                                     string
	memProfile                                     string
	countRequests                                  bool
	noEventsFeed                                   bool            // Kafka nodes publish nothing on troupe.events
	requests                                       *requestCounter // with countRequests, on kfake
}

func main() {
	var o options
	var scenarios string
	flag.IntVar(&o.tasks, "tasks", 2000, "measured tasks per scenario")
	flag.IntVar(&o.concurrency, "concurrency", 256, "tasks in flight")
	flag.IntVar(&o.warmup, "warmup", 200, "warm-up tasks per scenario, run at the same concurrency before measuring")
	flag.StringVar(&scenarios, "scenarios", "embedded,kafka-1,kafka-2", "comma-separated scenarios: embedded, kafka-1, kafka-2")
	flag.StringVar(&o.kafka, "kafka", os.Getenv("TROUPE_KAFKA"), "Kafka bootstrap servers host:port[,host:port] (default $TROUPE_KAFKA; empty: an in-process kfake)")
	flag.IntVar(&o.rounds, "rounds", 1, "run the scenarios this many times, interleaved (each round's ratios are against that round's embedded)")
	flag.IntVar(&o.partitions, "partitions", 12, "partitions of the troupe.* topics, which every run creates with a prefix of its own")
	flag.DurationVar(&o.timeout, "timeout", time.Minute, "how long one task may take before it counts as an error")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each scenario's measured phase to PREFIX-<scenario>-r<round>.pprof")
	flag.BoolVar(&o.countRequests, "requests", false, "count, at the in-process kfake, the Kafka requests of each scenario's measured phase, by kind and topic, and the records produced")
	flag.BoolVar(&o.noEventsFeed, "no-events-feed", false, "Kafka scenarios: the nodes publish no troupe.events records, as an embedded node whose feed has no reader publishes none (a diagnostic: what the public feed costs; results still go to troupe.results)")
	flag.StringVar(&o.memProfile, "memprofile", "", "write the allocations of the whole run (warm-up and setup included) to this file when it ends")
	flag.Parse()
	for _, s := range strings.Split(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.scenarios = append(o.scenarios, s)
		}
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, o)
	if o.memProfile != "" {
		err = errors.Join(err, writeAllocs(o.memProfile))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// writeAllocs writes the allocations the process made so far (pprof's allocs
// profile) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func (o options) validate() error {
	if o.tasks < 1 || o.concurrency < 1 || o.warmup < 0 || o.partitions < 1 || o.rounds < 1 || o.timeout <= 0 {
		return errors.New("-tasks, -concurrency, -partitions, -rounds and -timeout must be positive, -warmup not negative")
	}
	if len(o.scenarios) == 0 {
		return errors.New("no scenarios")
	}
	for _, s := range o.scenarios {
		if _, ok := kafkaNodes(s); !ok && s != "embedded" {
			return fmt.Errorf("unknown scenario %q (want embedded, kafka-1 or kafka-2)", s)
		}
	}
	return nil
}

// kafkaNodes returns how many nodes a Kafka scenario runs.
func kafkaNodes(scenario string) (int, bool) {
	switch scenario {
	case "kafka-1":
		return 1, true
	case "kafka-2":
		return 2, true
	}
	return 0, false
}

func run(ctx context.Context, o options) error {
	runID := time.Now().UTC().Format("20060102T150405.000000")
	runID = strings.ReplaceAll(runID, ".", "")
	topics := runTopics(runID, o.partitions)
	broker := o.kafka
	var brokers []string
	needKafka := false
	for _, s := range o.scenarios {
		if _, ok := kafkaNodes(s); ok {
			needKafka = true
		}
	}
	if o.countRequests && (!needKafka || broker != "") {
		fmt.Fprintln(os.Stderr, "-requests counts at the in-process kfake only: ignored")
	}
	if needKafka {
		if broker != "" {
			brokers = strings.Split(broker, ",")
		} else {
			var c *kfake.Cluster
			var err error
			part(ctx, "broker", func(context.Context) { c, err = kfake.NewCluster(kfake.NumBrokers(1)) })
			if err != nil {
				return fmt.Errorf("start kfake: %w", err)
			}
			defer c.Close()
			if o.countRequests {
				o.requests = countRequests(c)
			}
			brokers = c.ListenAddrs()
			broker = "kfake in this process (" + strings.Join(brokers, ",") + ")"
		}
		if err := ensureTopics(ctx, brokers, topics); err != nil {
			return err
		}
	}

	fmt.Printf("GOMAXPROCS=%d NumCPU=%d %s %s/%s, load average at the start: %s\n", runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, loadAvg())
	fmt.Printf("tasks=%d concurrency=%d warmup=%d task=%q (2 model calls, 1 calculator call)\n", o.tasks, o.concurrency, o.warmup, taskInput)
	if needKafka {
		fmt.Printf("kafka: %s, run %s, topics %s*\n", broker, runID, topics.Prefix)
	}
	fmt.Println()

	var results []result
	failed := false
	for round := 1; round <= o.rounds && ctx.Err() == nil; round++ {
		for _, s := range o.scenarios {
			if ctx.Err() != nil {
				break
			}
			name := s
			if o.rounds > 1 {
				name = fmt.Sprintf("%s #%d", s, round)
			}
			fmt.Fprintf(os.Stderr, "== %s (load average before: %s)\n", name, loadAvg())
			var r result
			var err error
			if k, ok := kafkaNodes(s); ok {
				r, err = runKafka(ctx, o, s, round, k, brokers, topics, runID)
			} else {
				r, err = runEmbedded(ctx, o, round)
			}
			r.name, r.scenario, r.round = name, s, round
			if err != nil {
				failed = true
				r.err = err
				fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			}
			results = append(results, r)
			for _, n := range r.notes {
				fmt.Fprintf(os.Stderr, "  %s\n", n)
			}
		}
	}
	printTable(results)
	if failed {
		return errors.New("some scenarios failed (see above)")
	}
	return ctx.Err()
}

func printTable(results []result) {
	base := map[int]float64{} // round -> embedded tasks/s
	for _, r := range results {
		if r.scenario == "embedded" && r.err == nil {
			base[r.round] = r.rate()
		}
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "scenario\ttasks\ttasks/s\tp50\tp99\tvs embedded\t")
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(w, "%s\tFAILED\t\t\t\t\t\n", r.name)
			continue
		}
		ratio := "-"
		if b := base[r.round]; b > 0 {
			ratio = fmt.Sprintf("%.2fx", r.rate()/b)
		}
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%s\t%s\t%s\t\n", r.name, len(r.latencies), r.rate(),
			fmtDur(r.percentile(0.50)), fmtDur(r.percentile(0.99)), ratio)
	}
	_ = w.Flush()
	fmt.Printf("load average at the end: %s\n", loadAvg())
	for _, r := range results {
		if r.err != nil {
			fmt.Printf("%s: %v\n", r.name, r.err)
		}
	}
}

// loadAvg returns the 1, 5 and 15 minute load averages (Linux), or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
}

// part runs f with the pprof label part=name, which every goroutine f starts
// inherits (and those they start), so that a CPU profile (-cpuprofile) tells the
// parts of the process apart: go tool pprof -tagfocus part=node (broker: the
// in-process kfake; node: the nodes, their Kafka clients included; client: the
// bench's own tasks and, on Kafka, its publisher and results reader).
func part(ctx context.Context, name string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("part", name), f)
}

// asPart labels the calling goroutine, and the goroutines it starts from now on,
// part=name (see part), until asPart is called again.
func asPart(ctx context.Context, name string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("part", name)))
}
