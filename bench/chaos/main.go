// Command chaos runs a Troupe cluster of `node serve` processes on Kafka and
// ClickHouse, drives mixed load at it (HTTP with and without Idempotency-Key, kcat,
// many tasks on one session, MCP run_task, A2A message/send) while it injects faults
// (kill -9, SIGSTOP past the session timeout, clean restarts, a fourth node added and
// removed), then checks from the HTTP API and ClickHouse that every accepted task
// ended exactly once. See README.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	mrand "math/rand"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

type options struct {
	bin, replay, dir, kafka, clickhouse, prefix, group, db, config, agents, secret string
	nodes, httpBase, verifySample                                                  int
	duration, faultGap, settle                                                     time.Duration
	rate                                                                           float64
	checkOnly                                                                      bool
	seed                                                                           int64
}

// scale divides a pacing interval by the rate.
func (o options) scale(d time.Duration) time.Duration { return time.Duration(float64(d) / o.rate) }

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func main() {
	var o options
	suffix := fmt.Sprint(time.Now().Unix())
	flag.StringVar(&o.bin, "bin", "", "the node binary (go build -o DIR/troupe-node ./cmd/node)")
	flag.StringVar(&o.replay, "replay", "", "the replay binary (go build -o DIR/replay ./cmd/replay); empty: skip replay verify")
	flag.StringVar(&o.dir, "dir", "", "working directory: configs, node logs and data (default a new temp dir)")
	flag.StringVar(&o.kafka, "kafka", "127.0.0.1:9092", "Kafka bootstrap address")
	flag.StringVar(&o.clickhouse, "clickhouse", "127.0.0.1:9000", "ClickHouse native address")
	flag.StringVar(&o.prefix, "prefix", "chaos"+suffix+".", "topic prefix")
	flag.StringVar(&o.group, "group", "chaos"+suffix, "consumer group")
	flag.StringVar(&o.db, "db", "chaos"+suffix, "ClickHouse database")
	flag.IntVar(&o.nodes, "nodes", 3, "nodes (a fourth is added and removed as a fault)")
	flag.IntVar(&o.httpBase, "http-base", 8180, "node i listens on 127.0.0.1:<http-base+i>")
	flag.DurationVar(&o.duration, "duration", 20*time.Minute, "how long to drive load")
	flag.DurationVar(&o.faultGap, "fault-gap", 60*time.Second, "mean time between faults (0: none)")
	flag.DurationVar(&o.settle, "settle", 4*time.Minute, "how long to wait for every task to end after the load")
	flag.Float64Var(&o.rate, "rate", 1, "load multiplier (1: about 6 tasks a second)")
	flag.IntVar(&o.verifySample, "verify", 20, "sessions to replay verify")
	flag.Int64Var(&o.seed, "seed", time.Now().UnixNano(), "seed of the faults: which fault, on which node, after which gap (the same seed gives the same sequence, for comparing two builds)")
	flag.BoolVar(&o.checkOnly, "check-only", false, "do not start nodes or load; only check the database (needs -dir of a run and nodes up)")
	flag.Parse()
	if o.bin == "" {
		fmt.Fprintln(os.Stderr, "chaos: -bin is required")
		os.Exit(2)
	}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "troupe-chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		o.dir = d
	}
	if err := writeConfigs(&o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	logf("dir %s, prefix %s, group %s, database %s, seed %d (-seed repeats the faults)", o.dir, o.prefix, o.group, o.db, o.seed)
	os.Exit(run(o))
}

func writeConfigs(o *options) error {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	script := `{"name":"noter-script","steps":[
 {"tool_calls":[{"id":"c1","name":"notes","arguments":"{\"op\":\"add\",\"args\":{\"type\":\"fact\",\"body\":\"chaos side effect\"}}"}]},
 {"content":"noted"}]}`
	o.config = filepath.Join(o.dir, "config.json")
	o.agents = filepath.Join(o.dir, "agents.yaml")
	sp := filepath.Join(o.dir, "script.json")
	// lead hands a note to a child session of noter (the delegate tool): the
	// child, routed by its own key, often runs on another node.
	lead := `{"name":"lead-script","steps":[
 {"tool_calls":[{"id":"d1","name":"delegate","arguments":"{\"agent\":\"noter\",\"task\":\"note this\"}"}]},
 {"content":"delegated"}]}`
	lp := filepath.Join(o.dir, "lead.json")
	agents := "agents:\n  noter:\n    description: Adds one note per task, an observable side effect.\n    model: scripted:" + sp + "\n    tools: [notes]\n    max_steps: 4\n" +
		"  lead:\n    description: Delegates one note to noter.\n    model: scripted:" + lp + "\n    tools: [delegate]\n    max_steps: 4\n"
	for p, s := range map[string]string{sp: script, lp: lead, o.config: `{"tools": {"notes": {"max_notes": 100000}}}`, o.agents: agents} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return err
		}
	}
	b := make([]byte, 32)
	rand.Read(b)
	o.secret = hex.EncodeToString(b)
	return nil
}

func run(o options) int {
	c := &cluster{o: o, nodes: map[int]*proc{}}
	defer c.stopAll()
	for i := 1; i <= o.nodes; i++ {
		if err := c.start(i); err != nil {
			logf("start: %v", err)
			return 1
		}
		logf("node%d up on %s", i, c.addr(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.duration)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; logf("signal: ending the load"); cancel() }()
	st := newStats()
	wg := c.load(ctx, st, o)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if o.faultGap > 0 {
			c.faults(ctx, mrand.New(mrand.NewSource(o.seed)), o.nodes, o.faultGap, st)
		}
	}()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			st.mu.Lock()
			logf("progress: %d sessions, faults %v, live nodes %d", len(st.sessions), st.faults, len(c.live()))
			st.mu.Unlock()
		}
	}
	logf("load over; waiting for submissions in flight and the last fault")
	wg.Wait()
	<-faultsDone
	// every node of 1..n up again, unpaused
	for i := 1; i <= o.nodes; i++ {
		if p := c.get(i); p == nil {
			c.restart(i)
		}
	}
	return check(c, st, o)
}
