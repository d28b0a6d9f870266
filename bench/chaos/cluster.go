package main

import (
	"context"
	"fmt"
	mrand "math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// cluster runs `node serve` processes of one binary on one Kafka and ClickHouse,
// under a topic prefix, consumer group and database of their own.
type cluster struct {
	o     options
	mu    sync.Mutex
	nodes map[int]*proc
}

type proc struct {
	id     int
	cmd    *exec.Cmd
	base   string
	done   chan struct{}
	paused bool
}

func (c *cluster) addr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.o.httpBase+i) }

// start starts node i and waits until it answers /healthz.
func (c *cluster) start(i int) error {
	dir := filepath.Join(c.o.dir, fmt.Sprintf("data%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(c.o.dir, fmt.Sprintf("node%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.o.bin, "serve", "--kafka", c.o.kafka, "--clickhouse", c.o.clickhouse,
		"--group", c.o.group, "--topic-prefix", c.o.prefix, "--node-id", fmt.Sprintf("chaos-n%d", i),
		"--http", c.addr(i), "--config", c.o.config, "--agents", c.o.agents, "--model", "offline", "--data", dir)
	cmd.Env = append(os.Environ(), "TROUPE_CLICKHOUSE_DATABASE="+c.o.db, "TROUPE_SECRET_KEY="+c.o.secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	p := &proc{id: i, cmd: cmd, base: "http://" + c.addr(i), done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	c.mu.Lock()
	c.nodes[i] = p
	c.mu.Unlock()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("node%d exited while starting (see node%d.log)", i, i)
		default:
		}
		r, err := http.Get(p.base + "/healthz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("node%d: no /healthz in 90s", i)
}

func (c *cluster) get(i int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// live returns the base URLs of the nodes that run and are not paused.
func (c *cluster) live() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, p := range c.nodes {
		select {
		case <-p.done:
			continue
		default:
		}
		if !p.paused {
			out = append(out, p.base)
		}
	}
	return out
}

func (c *cluster) kill9(i int) {
	if p := c.get(i); p != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// stop sends TERM and waits (KILL after 40 s).
func (c *cluster) stop(i int) {
	p := c.get(i)
	if p == nil {
		return
	}
	if p.paused {
		c.cont(i)
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(40 * time.Second):
		logf("node%d: no exit 40 s after TERM: KILL", i)
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	c.mu.Lock()
	delete(c.nodes, i)
	c.mu.Unlock()
}

func (c *cluster) pause(i int) {
	if p := c.get(i); p != nil {
		c.mu.Lock()
		p.paused = true
		c.mu.Unlock()
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP)
	}
}

func (c *cluster) cont(i int) {
	if p := c.get(i); p != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT)
		c.mu.Lock()
		p.paused = false
		c.mu.Unlock()
	}
}

func (c *cluster) stopAll() {
	c.mu.Lock()
	ids := make([]int, 0, len(c.nodes))
	for i := range c.nodes {
		ids = append(ids, i)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, i := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(i) }()
	}
	wg.Wait()
}

// faults injects one fault at a time, every gap (jittered), on nodes 1..n, until ctx
// ends, drawn from rng, which only this goroutine uses: the same seed gives the same
// faults.
func (c *cluster) faults(ctx context.Context, rng *mrand.Rand, n int, gap time.Duration, st *stats) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap/2 + time.Duration(rng.Int63n(int64(gap)))):
		}
		i := 1 + rng.Intn(n)
		switch k := rng.Intn(4); k {
		case 0:
			logf("fault: kill -9 node%d", i)
			st.fault("kill9")
			c.kill9(i)
			time.Sleep(3 * time.Second)
			c.restart(i)
		case 1:
			logf("fault: SIGSTOP node%d for 25 s", i)
			st.fault("sigstop")
			c.pause(i)
			time.Sleep(25 * time.Second)
			c.cont(i)
			logf("fault: SIGCONT node%d", i)
		case 2:
			logf("fault: clean restart of node%d", i)
			st.fault("restart")
			c.stop(i)
			c.restart(i)
		case 3:
			extra := n + 1
			logf("fault: add node%d", extra)
			st.fault("add-node")
			if err := c.start(extra); err != nil {
				logf("add node%d: %v", extra, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(45 * time.Second):
			}
			logf("fault: remove node%d", extra)
			c.stop(extra)
		}
	}
}

func (c *cluster) restart(i int) {
	if err := c.start(i); err != nil {
		logf("restart node%d: %v", i, err)
	}
}
