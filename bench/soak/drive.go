package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

// child is the node process under measurement.
type child struct {
	cmd     *exec.Cmd
	base    string // http://host:port
	builtin bool   // the -serve child, with /debug/pprof and /debug/vars
	client  *http.Client
	done    chan error
}

func run(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "troupe-soak-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "soak: data and child log in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	c, err := startChild(ctx, o, dir)
	if err != nil {
		return err
	}
	defer c.stop()
	fmt.Printf("soak: %s; child pid %d (%s); GOMAXPROCS %d, %d CPUs, load %s\n",
		strings.Join(os.Args[1:], " "), c.cmd.Process.Pid, c.kind(o), runtime.GOMAXPROCS(0), runtime.NumCPU(), loadavg())

	var snaps []snapshot
	take := func(phase string, tasks int, gc bool) error {
		s, err := c.snapshot(ctx, phase, tasks, gc, o.profile)
		if err != nil {
			return fmt.Errorf("measure %s: %w", phase, err)
		}
		snaps = append(snaps, s)
		fmt.Fprintf(os.Stderr, "soak: %s\n", s)
		return nil
	}
	if err := take("idle", 0, true); err != nil {
		return err
	}
	d := newDriver(c, o)
	done := 0
	for _, target := range o.checkpoints {
		start := time.Now()
		if err := d.runUntil(ctx, target); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "soak: %d tasks in %s (%.0f tasks/s)\n", target-done, time.Since(start).Round(time.Millisecond),
			float64(target-done)/time.Since(start).Seconds())
		done = target
		if err := take(fmt.Sprintf("after-%d", target), target, true); err != nil {
			return err
		}
		waited, err := c.waitPassivated(ctx, o.idleWait)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "soak: every session actor passivated after %s\n", waited.Round(time.Millisecond))
		if err := take(fmt.Sprintf("passivated-%d", target), target, true); err != nil {
			return err
		}
		if o.linger > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(o.linger):
			}
			if err := take(fmt.Sprintf("lingered-%d", target), target, true); err != nil {
				return err
			}
		}
		if c.builtin {
			if err := c.post(ctx, "/debug/free"); err != nil {
				return err
			}
			if err := take(fmt.Sprintf("freed-%d", target), target, false); err != nil {
				return err
			}
		}
	}
	printTable(os.Stdout, snaps)
	return nil
}

func (c *child) kind(o options) string {
	if c.builtin {
		return fmt.Sprintf("built-in -serve child, idle timeout %s", o.idleTimeout)
	}
	return o.nodeBin + " serve"
}

func startChild(ctx context.Context, o options, dir string) (*child, error) {
	c := &child{done: make(chan error, 1), client: &http.Client{
		Timeout:   o.taskTimeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: 2 * o.concurrency, IdleConnTimeout: time.Minute},
	}}
	logf, err := os.Create(filepath.Join(dir, "child.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	data := filepath.Join(dir, "data")
	var stdout io.ReadCloser
	if o.nodeBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		c.builtin = true
		c.cmd = exec.Command(exe, "-serve", "-data", data, "-idle-timeout", o.idleTimeout.String(), "-max-sessions", fmt.Sprint(o.maxSessions))
		if stdout, err = c.cmd.StdoutPipe(); err != nil {
			return nil, err
		}
	} else {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		c.base = "http://" + addr
		args := append([]string{"serve", "--data", data, "--http", addr, "--model", "offline"}, o.nodeArgs...)
		c.cmd = exec.Command(o.nodeBin, args...)
		c.cmd.Stdout = logf
	}
	c.cmd.Dir = dir // no .troupe.json of the caller's
	c.cmd.Stderr = logf
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	if c.builtin {
		line := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			if sc.Scan() {
				line <- sc.Text()
			}
			close(line)
			_, _ = io.Copy(io.Discard, stdout)
		}()
		select {
		case l, ok := <-line:
			addr, found := strings.CutPrefix(l, "listening ")
			if !ok || !found {
				c.stop()
				return nil, fmt.Errorf("the child did not start (see %s)", logf.Name())
			}
			c.base = "http://" + addr
		case <-time.After(time.Until(deadline)):
			c.stop()
			return nil, errors.New("the child did not listen within 30 s")
		}
	}
	for {
		if _, err := c.get(ctx, "/healthz"); err == nil {
			return c, nil
		}
		select {
		case err := <-c.done:
			return nil, fmt.Errorf("the child exited: %v (see %s)", err, logf.Name())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("the child did not answer /healthz within 30 s (see %s)", logf.Name())
		}
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// stop ends the child with SIGTERM, then SIGKILL after 20 s.
func (c *child) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func (c *child) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

func (c *child) post(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", path, resp.Status)
	}
	return nil
}

// driver submits tasks from o.concurrency clients. Client w sends every hotEvery-th
// of its tasks to one of its own hotPerWorker repeated sessions, the others each to a
// new session; a client waits for its task to end before the next, so the tasks of a
// repeated session never overlap.
type driver struct {
	c       *child
	o       options
	next    atomic.Int64 // tasks handed out
	perHot  []atomic.Int64
	started time.Time
}

func newDriver(c *child, o options) *driver {
	return &driver{c: c, o: o, perHot: make([]atomic.Int64, o.concurrency)}
}

// runUntil runs tasks until target tasks were run in all.
func (d *driver) runUntil(ctx context.Context, target int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var finished atomic.Int64
	finished.Store(d.next.Load())
	step := max(int64(target)/10, 1)
	for w := range d.o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := d.next.Add(1)
				if i > int64(target) {
					d.next.Add(-1)
					return
				}
				sid := fmt.Sprintf("soak-%d", i)
				if d.o.hotEvery > 0 {
					if j := d.perHot[w].Add(1); j%int64(d.o.hotEvery) == 0 {
						sid = fmt.Sprintf("soak-hot-%d-%d", w, (j/int64(d.o.hotEvery))%int64(d.o.hotPerWorker))
					}
				}
				if err := d.task(ctx, sid); err != nil {
					cancel(err)
					return
				}
				if f := finished.Add(1); f%step == 0 {
					fmt.Fprintf(os.Stderr, "soak: %d tasks done\n", f)
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// task submits "echo hi" to a session and polls the session's status until the task
// ended; it must complete with output "hi".
func (d *driver) task(ctx context.Context, sid string) error {
	body, _ := json.Marshal(map[string]string{"input": "echo hi", "session_id": sid})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.c.base+"/v1/tasks", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.c.client.Do(req)
	if err != nil {
		return fmt.Errorf("session %s: POST /v1/tasks: %w", sid, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("session %s: POST /v1/tasks: %s: %s", sid, resp.Status, bytes.TrimSpace(b))
	}
	// The node answers 202 once the session recorded the task, so from here on the
	// session's status is this task's.
	deadline := time.Now().Add(d.o.taskTimeout)
	wait := time.Millisecond
	for {
		b, err := d.c.get(ctx, "/v1/sessions/"+sid)
		if err != nil {
			return fmt.Errorf("session %s: %w", sid, err)
		}
		var st struct{ Status, Output, Error string }
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("session %s: status %s: %w", sid, b, err)
		}
		switch st.Status {
		case "completed":
			if st.Output != "hi" {
				return fmt.Errorf("session %s: completed with output %q, want \"hi\"", sid, st.Output)
			}
			return nil
		case "failed":
			return fmt.Errorf("session %s: task failed: %s", sid, st.Error)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("session %s: the task did not end within %s (status %q)", sid, d.o.taskTimeout, st.Status)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(wait):
		}
		wait = min(wait*2, 20*time.Millisecond)
	}
}

func printTable(w io.Writer, snaps []snapshot) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttasks\tRSS MiB\tpeak RSS MiB\theap in use MiB\theap alloc MiB\theap objects\tgoroutines\tsession actors\tevicted\tdedupe IDs\teffect answers\t")
	for _, s := range snaps {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.phase, s.tasks, mib(s.rssKB*1024), mib(s.hwmKB*1024),
			orNA(s.heapInuse, func(v float64) string { return fmt.Sprintf("%.1f", mib(int64(v))) }),
			orNA(s.heapAlloc, func(v float64) string { return fmt.Sprintf("%.1f", mib(int64(v))) }),
			orNA(s.heapObjects, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			orNA(s.goroutines, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			orNA(s.sessions, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			orNA(s.evicted, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			orNA(s.dedupeIDs, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			orNA(s.answers, func(v float64) string { return fmt.Sprintf("%.0f", v) }))
	}
	_ = tw.Flush()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
