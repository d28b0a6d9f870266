// Command soak measures a node's memory over many one-step tasks: it starts a node in a
// child process, submits tasks over HTTP (POST /v1/tasks, then GET /v1/sessions/{id}
// until the task ended), and at each checkpoint waits until every session actor
// passivated, then prints the child's resident set (VmRSS from /proc) and its Go heap.
//
// The child is this program in -serve mode by default: an embedded node (in-process
// bus, SQLite log, offline model) built with node.New and served with node.Handler,
// as node serve does, plus /debug/pprof and /debug/vars, so that its heap can be
// profiled after a GC; its session idle timeout is -idle-timeout. With -node PATH the
// child is a real node binary started as "PATH serve --model offline"; its heap comes
// from /metrics, and passivation takes its own idle timeout (1 minute by default).
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

type options struct {
	checkpoints  []int
	concurrency  int
	hotPerWorker int
	hotEvery     int
	idleTimeout  time.Duration
	maxSessions  int
	idleWait     time.Duration
	linger       time.Duration
	taskTimeout  time.Duration
	nodeBin      string
	nodeArgs     []string
	profile      string
	keep         bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve" {
		if err := serveChild(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "soak -serve:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var checkpoints, nodeArgs string
	flag.StringVar(&checkpoints, "tasks", "10000", "comma-separated cumulative task counts at which to measure, e.g. 10000,100000")
	flag.IntVar(&o.concurrency, "concurrency", 32, "clients submitting tasks at once (each waits for its task to end before the next)")
	flag.IntVar(&o.hotPerWorker, "hot", 4, "repeated session IDs per client: every -hot-every-th task of a client goes to one of them")
	flag.IntVar(&o.hotEvery, "hot-every", 10, "send every n-th task of a client to a repeated session (0: every task gets a new session)")
	flag.DurationVar(&o.idleTimeout, "idle-timeout", 5*time.Second, "session idle timeout of the -serve child")
	flag.IntVar(&o.maxSessions, "max-sessions", 0, "bound on the live session actors of the -serve child (0: the node's default, 10000)")
	flag.DurationVar(&o.idleWait, "idle-wait", 3*time.Minute, "how long to wait at a checkpoint for every session actor to passivate")
	flag.DurationVar(&o.linger, "linger", 0, "after passivation, wait this long more and measure again (e.g. 11m: past the node's 10-minute dedupe and effect-answer TTL)")
	flag.DurationVar(&o.taskTimeout, "timeout", time.Minute, "how long one task may take")
	flag.StringVar(&o.nodeBin, "node", "", "drive this node binary (node serve) instead of the built-in -serve child")
	flag.StringVar(&nodeArgs, "node-args", "", "extra space-separated arguments for the -node binary, e.g. \"--idle-timeout 5s\" where it has that flag")
	flag.StringVar(&o.profile, "heapprofile", "", "with the -serve child: write heap profiles (after a GC) to PREFIX-<phase>.pprof")
	flag.BoolVar(&o.keep, "keep", false, "keep the child's data directory and log")
	flag.Parse()
	for _, s := range strings.Split(checkpoints, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || (len(o.checkpoints) > 0 && n <= o.checkpoints[len(o.checkpoints)-1]) {
			fmt.Fprintf(os.Stderr, "soak: -tasks %q: want increasing positive counts\n", checkpoints)
			os.Exit(2)
		}
		o.checkpoints = append(o.checkpoints, n)
	}
	o.nodeArgs = strings.Fields(nodeArgs)
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.concurrency < 1:
		return errors.New("-concurrency must be positive")
	case o.hotEvery < 0 || o.hotPerWorker < 0 || (o.hotEvery > 0 && o.hotPerWorker == 0):
		return errors.New("-hot-every must not be negative, and -hot must be positive when it is not 0")
	case o.idleTimeout <= 0 || o.idleWait <= 0 || o.taskTimeout <= 0 || o.linger < 0 || o.maxSessions < 0:
		return errors.New("-idle-timeout, -idle-wait and -timeout must be positive, -linger and -max-sessions not negative")
	case o.profile != "" && o.nodeBin != "":
		return errors.New("-heapprofile needs the built-in -serve child (a node binary serves no pprof)")
	}
	return nil
}
