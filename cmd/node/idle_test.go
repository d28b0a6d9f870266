package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The test here leaves a cluster idle the way users' clusters sit idle overnight,
// then gives it work. Production's idle timeouts are minutes long; the test lowers
// each where a user can (the node's --idle-timeout, the broker's
// connections.max.idle.ms on a broker of its own: that one cannot be changed on a
// running broker, not even per listener) and plays the network's part itself, with
// TCP proxies between the nodes and ClickHouse and Kafka that forget idle
// connections as a NAT or a load balancer does, or close them as a server does.

// idleProxy forwards TCP connections to a server, and forgets idle ones the way the
// network between a client and a server does when its idle timer expires, which
// the test makes happen at once (expireIdle) rather than after production's
// minutes: the first (and third, …) idle connection is forgotten as by a NAT or a
// load balancer, and from then on every byte sent on it either way vanishes, with
// no RST and no FIN: the sockets stay open, so that the client learns of it only
// from a timeout of its own; the second (and fourth, …) is closed, as a server
// closes idle connections (ClickHouse's idle_connection_timeout, Kafka's
// connections.max.idle.ms). New connections are forwarded.
type idleProxy struct {
	tcpProxy
	conns map[*proxied]struct{}
	n     int // connections expired

	forgotten, closedIdle atomic.Int64
	// lost counts the bytes sent on forgotten connections, which vanished.
	lost atomic.Int64
}

// tcpProxy is what the tests' TCP proxies share: a listener on a loopback port,
// a lock, whether the proxy is closed, and its goroutines.
type tcpProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	closed bool // under mu
	wg     sync.WaitGroup
}

// listen listens on a loopback port and, until the listener is closed, accepts
// connections there and dials target for each (a client whose server cannot be
// dialed is closed); under mu, unless the proxy is closed, it hands the two to
// add, which forwards them (its goroutines counted in wg). Once the proxy is
// closed, the pair is closed and accepting stops.
func (p *tcpProxy) listen(t *testing.T, target string, add func(client, server net.Conn)) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			closed := p.closed
			if !closed {
				add(c, s)
			}
			p.mu.Unlock()
			if closed {
				c.Close()
				s.Close()
				return
			}
		}
	}()
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// shut closes the proxy once: under mu, it marks it closed and calls drop (which
// closes its connections); then it closes the listener and waits for the
// proxy's goroutines.
func (p *tcpProxy) shut(drop func()) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	drop()
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// proxied is one client connection and its connection to the server.
type proxied struct {
	client, server net.Conn
	last           atomic.Int64 // UnixNano of the last byte either way
	dead           atomic.Bool  // forgotten: bytes vanish
}

// startIdleProxy listens on a loopback port and forwards to target until the test
// ends.
func startIdleProxy(t *testing.T, target string) *idleProxy {
	t.Helper()
	p := &idleProxy{conns: map[*proxied]struct{}{}}
	p.listen(t, target, p.add)
	t.Cleanup(p.Close)
	return p
}

// add forwards the client connection c to the server connection s.
func (p *idleProxy) add(c, s net.Conn) {
	pc := &proxied{client: c, server: s}
	pc.last.Store(time.Now().UnixNano())
	p.conns[pc] = struct{}{}
	p.wg.Add(2)
	go p.pipe(pc, c, s)
	go p.pipe(pc, s, c)
}

// pipe copies from to to until either side ends; on a forgotten connection it
// reads and drops (the bytes vanish on the way).
func (p *idleProxy) pipe(pc *proxied, from, to net.Conn) {
	defer p.wg.Done()
	defer p.drop(pc)
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			if pc.dead.Load() {
				p.lost.Add(int64(n))
			} else {
				pc.last.Store(time.Now().UnixNano())
				if _, werr := to.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// drop closes both sides of pc and forgets it.
func (p *idleProxy) drop(pc *proxied) {
	pc.client.Close()
	pc.server.Close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// expireIdle forgets or closes, in turn, the connections that carried nothing for
// idle, and returns how many.
func (p *idleProxy) expireIdle(idle time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pc := range p.conns {
		if pc.dead.Load() || time.Since(time.Unix(0, pc.last.Load())) < idle {
			continue
		}
		n++
		p.n++
		if p.n%2 == 1 {
			pc.dead.Store(true)
			p.forgotten.Add(1)
		} else {
			p.closedIdle.Add(1)
			pc.client.Close()
			pc.server.Close()
		}
	}
	return n
}

// Close stops the proxy and closes every connection.
func (p *idleProxy) Close() {
	p.shut(func() {
		for pc := range p.conns {
			pc.client.Close()
			pc.server.Close()
		}
	})
}

// ownBroker starts a Kafka broker of the test's own with deploy/kafka.sh, in a run
// directory of its own, that listens on listen, tells clients to connect to
// advertised (a proxy in front of it) and closes connections idle for maxIdle
// (connections.max.idle.ms; production's default is 10 minutes). It returns why
// when it cannot (deploy/kafka.sh has not installed the broker here, or no Java).
func ownBroker(t *testing.T, listen, advertised string, maxIdle time.Duration) (why string) {
	t.Helper()
	controller := freeAddr(t)
	_, port, _ := net.SplitHostPort(listen)
	_, cport, _ := net.SplitHostPort(controller)
	env := append(os.Environ(), "TROUPE_DEPLOY_RUN="+t.TempDir(), "KAFKA_HOST=127.0.0.1", "KAFKA_PORT="+port,
		"KAFKA_CONTROLLER_PORT="+cport, "KAFKA_HEAP=256m", "KAFKA_WAIT_SECONDS=90", "KAFKA_ADVERTISED="+advertised,
		fmt.Sprintf("KAFKA_EXTRA_PROPERTIES=connections.max.idle.ms=%d", maxIdle.Milliseconds()))
	script := filepath.Join("..", "..", "deploy", "kafka.sh")
	kafkaSh := func(cmd string) ([]byte, error) {
		c := exec.Command("bash", script, cmd)
		c.Env = env
		return c.CombinedOutput()
	}
	if out, err := kafkaSh("start"); err != nil {
		return fmt.Sprintf("deploy/kafka.sh start: %v: %s", err, strings.TrimSpace(tail(string(out), 300)))
	}
	t.Cleanup(func() {
		if out, err := kafkaSh("stop"); err != nil {
			t.Errorf("deploy/kafka.sh stop: %v\n%s", err, out)
		}
	})
	if out, err := kafkaSh("wait"); err != nil {
		t.Fatalf("deploy/kafka.sh wait: %v\n%s", err, out)
	}
	return ""
}

// repeatedLogLines returns the lines of log, from offset on, that say something
// failed (at level WARN or ERROR, or with "fail" in their message), by message,
// that occur at least min times.
func repeatedLogLines(log string, offset, min int) map[string]int {
	count := map[string]int{}
	for _, line := range strings.Split(log[offset:], "\n") {
		m := logMessage.FindStringSubmatch(line)
		if m == nil || !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") && !strings.Contains(m[1], "fail") {
			continue
		}
		count[m[1]]++
	}
	for m, n := range count {
		if n < min {
			delete(count, m)
		}
	}
	return count
}

// logMessage finds the message of a log line of the node's (slog's text format).
var logMessage = regexp.MustCompile(`\bmsg=("(?:[^"\\]|\\.)*"|\S+)`)

// TestClusterIdlePastEveryTimeoutThenWork: two nodes on Kafka and ClickHouse run
// tasks (some from kcat with its default settings, some over HTTP), then sit idle
// past their session actors' idle timeout (--idle-timeout 2s: every session is
// passivated), past the consumer group's session timeout (10 s), past the broker's
// idle timeout (5 s here: it closes the idle connections), and past the idle timer
// of the network between them and ClickHouse and Kafka, which forgets half of the
// idle connections (their bytes vanish from then on, with no RST) and closes the
// other half. Then tasks come again, from kcat and over HTTP: a second task for every
// session of the first round (its actor folds it back from the log), and tasks for
// new sessions. Every task completes once, in the order published, within a
// deadline that only a hang misses; every side effect happens once; every session's
// seqs run 1, 2, 3, … with one event at each; and the nodes' logs do not go on
// repeating a warning or an error once the work is done.
func TestClusterIdlePastEveryTimeoutThenWork(t *testing.T) {
	kcat := clusterServices(t)
	dir := t.TempDir()
	env := newClusterEnv(t, dir)
	script, records, modelLog := oneRecordScript(t, dir)
	chProxy := startIdleProxy(t, env.clickhouse)
	// Kafka: a broker of the test's own, which closes idle connections after 5 s,
	// behind the same kind of network, since the broker's metadata must name the
	// proxy for the clients to stay behind it. Without one, the cluster's broker.
	broker := freeAddr(t)
	kafkaProxy := startIdleProxy(t, broker)
	if why := ownBroker(t, broker, kafkaProxy.Addr(), 5*time.Second); why == "" {
		env.brokers = kafkaProxy.Addr()
	} else {
		kafkaProxy = nil
		t.Logf("the nodes use the Kafka at %s, which closes idle connections when it will, with nothing forgetting them: %s", env.brokers, why)
	}
	nodeEnv := env
	nodeEnv.clickhouse = chProxy.Addr()
	flags := []string{"-v", "--idle-timeout", "2s"}
	nodes := []*child{
		startClusterNode(t, nodeEnv, "n1", "all", script, records, modelLog, flags...),
		startClusterNode(t, nodeEnv, "n2", "all", script, records, modelLog, flags...),
	}
	waitOwned(t, nodes...)
	log := env.openLog(t)
	defer log.Close()

	prefix := fmt.Sprintf("idle-%d-", time.Now().UnixNano())
	inputs := map[string][]string{}
	var ids []string
	// publish gives each session its next task: over kcat (one run for all of
	// them), or over HTTP to the nodes in turn.
	publish := func(sessions []string, http bool) {
		var lines []string
		for i, id := range sessions {
			if len(inputs[id]) == 0 {
				ids = append(ids, id)
			}
			in := fmt.Sprintf("%s t%d", id, len(inputs[id]))
			inputs[id] = append(inputs[id], in)
			if http {
				nodes[i%len(nodes)].post(t, fmt.Sprintf(`{"input":%q,"session_id":%q}`, in, id))
			} else {
				lines = append(lines, fmt.Sprintf(`%s|{"input":%q}`, id, in))
			}
		}
		if len(lines) > 0 {
			kcatPublish(t, kcat, env, []string{"-K", "|"}, lines...)
		}
	}
	named := func(kind string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s%s%d", prefix, kind, i))
		}
		return out
	}
	want := func() map[string]int {
		w := map[string]int{}
		for _, id := range ids {
			w[id] = len(inputs[id])
		}
		return w
	}

	// The first round, while every connection is fresh.
	firstKcat, firstHTTP := named("kcat-a", 4), named("http-a", 4)
	publish(firstKcat, false)
	publish(firstHTTP, true)
	if !waitTasksEnded(t, log, want(), 120*time.Second) {
		t.FailNow()
	}

	// Idle: every session actor passivated (--idle-timeout), and the nodes idle
	// past the consumer group's session timeout (10 s) and the network's idle
	// timer.
	idleFrom := time.Now()
	passivated := func(id string) bool {
		for _, c := range nodes {
			for _, line := range strings.Split(c.stderr.String(), "\n") {
				if strings.Contains(line, `msg="session passivated"`) && strings.Contains(line+" ", " session="+id+" ") {
					return true
				}
			}
		}
		return false
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "session "+id+" passivated", func() bool { return passivated(id) })
	}
	time.Sleep(12*time.Second - time.Since(idleFrom))
	// The network's idle timer expires (at minutes in production): it forgets or
	// closes every connection to ClickHouse idle for more than the session idle
	// timeout.
	chProxy.expireIdle(3 * time.Second)
	forgotten, closed := chProxy.forgotten.Load(), chProxy.closedIdle.Load()
	if forgotten == 0 || closed == 0 {
		t.Fatalf("the network forgot %d idle ClickHouse connections and closed %d: the test proves nothing", forgotten, closed)
	}
	kafkaExpired := 0
	if kafkaProxy != nil {
		// And every connection to Kafka idle that long (the broker closes those
		// idle for 5 s itself); those in use (fetches, heartbeats) stay.
		kafkaExpired = kafkaProxy.expireIdle(3 * time.Second)
	}
	logFrom := make([]int, len(nodes))
	for i, c := range nodes {
		logFrom[i] = len(c.stderr.String())
	}

	// The second round: the first round's sessions again, and new ones.
	publish(firstKcat, false)
	publish(named("kcat-b", 4), false)
	publish(firstHTTP, true)
	publish(named("http-b", 2), true)
	resumed := time.Now()
	// A deadline only a hang misses; how long the round took is judged by what
	// the nodes logged, below, not by the clock.
	if !waitTasksEnded(t, log, want(), 90*time.Second) {
		t.FailNow()
	}
	took := time.Since(resumed)

	total := 0
	for _, id := range ids {
		assertTasksInOrder(t, log, id, inputs[id])
		total += len(inputs[id])
	}
	assertEffectsOnce(t, records, modelLog, nil, nil, total)
	assertGapFree(t, log, ids)
	if hidden := assertOneEventPerSeq(t, env, prefix); hidden != 0 {
		t.Errorf("%d rows of the sessions are hidden from Read", hidden)
	}
	conn := clickhouseConn(t, env)
	rows := assertNothingShadowed(t, conn, log, prefix)

	// The work is done: what the nodes log from now on must not be a warning or an
	// error repeated over and over (a loop on a dead connection).
	quiet := make([]int, len(nodes))
	for i, c := range nodes {
		quiet[i] = len(c.stderr.String())
	}
	time.Sleep(5 * time.Second)
	for i, c := range nodes {
		out := c.stderr.String()
		// A node that waited on a connection the network forgot until its own
		// deadlines ended it (30 s for a task to reach its session, a minute for a
		// query) timed the task out and handled it again.
		if round := out[logFrom[i]:quiet[i]]; strings.Contains(round, "future: timeout") {
			t.Errorf("node n%d timed a task out after the idle period (it waited on a dead connection):\n%s", i+1, round)
		}
		if rep := repeatedLogLines(out, quiet[i], 3); len(rep) > 0 {
			t.Errorf("node n%d goes on logging, after the work is done: %v", i+1, rep)
		}
		t.Logf("node n%d: warnings and errors while the second round ran: %v", i+1, repeatedLogLines(out[:quiet[i]], logFrom[i], 1))
	}
	t.Logf("%d sessions, %d tasks (%d after the idle period), all completed once in order; rows %d; ClickHouse connections forgotten by the network %d (%d bytes vanished), closed %d; idle Kafka connections forgotten or closed %d; the second round took %s",
		len(ids), total, total-len(firstKcat)-len(firstHTTP), rows, chProxy.forgotten.Load(), chProxy.lost.Load(), chProxy.closedIdle.Load(),
		kafkaExpired, took.Round(100*time.Millisecond))
}
