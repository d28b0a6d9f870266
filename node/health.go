package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// healthWait bounds how long a health check (Healthy, Live; GET /healthz and
// GET /livez) waits for the node's dependencies to answer its probes. It is
// well under the second a Kubernetes probe waits by default (timeoutSeconds:
// 1), so that a dependency that hangs gets the node a 503 that names it, rather
// than a probe that times out with no reason given.
const healthWait = 500 * time.Millisecond

// healthTimeout bounds one probe of a dependency: a request to the session host,
// or the event log's probe (its probe write, the read of who owns it). A probe
// runs in the background, past the healthWait of the check that started it: the
// checks that come while it runs wait for it rather than start their own.
const healthTimeout = 2 * time.Second

// Healthy returns nil when the node can run tasks, or why it cannot: it is
// stopping; its session host does not answer (it stopped, or it is stuck), in
// which case tasks submitted to it would wait in vain for their sessions; another
// node took its log (logOwner); on a bus that can tell (BusReach: Kafka), its
// brokers cannot be reached, so that a new task could not be queued; or, on a
// node whose ingress hands new tasks to its sessions itself (the embedded bus),
// its event log cannot write (a full disk: eventlog.ErrFull; ClickHouse down or
// refusing writes) or does not answer. The log's writes go by its last write
// where the log can tell (eventlog.Health), which costs nothing while writes go
// through; once one failed, the log tries a small write of its own, at most once
// a second, so that the node is healthy again once space is freed or the server
// is back, whether or not a session wrote since. A node that owns its whole log
// (logOwner: ClickHouse without Kafka) also reads who owns it, at most once a
// second: a read that fails, or does not answer, makes the node unhealthy too,
// until one goes through.
//
// A node on Kafka whose log cannot write is healthy, but degraded (Degraded): its
// ingress still takes new tasks and queues them on Kafka, where they wait until
// the log writes again; refusing it work for that would take every node out of
// a load balancer's rotation at once, since they share the log.
// So is a node whose group left it holding partitions another node took
// (stranded): a node of another group takes them from every node of the
// cluster at once.
//
// Healthy returns within healthWait whatever hangs: each dependency is probed
// by one probe at a time (healthProbe), which the checks made while it runs
// share, and a probe that has not answered by then makes Healthy say so ("the
// event log (clickhouse) did not answer a probe within 500ms"). A check made
// every 100 ms against a hung dependency holds one probe and one connection to
// it, not one per check; once the dependency answers again, the next check that
// finds no probe under way starts one and says so.
//
// A node that is unhealthy only for its log, or its bus, is alive (Live):
// restarting it would not free space, nor bring ClickHouse or Kafka back.
func (n *Node) Healthy() error {
	err, _ := n.readiness()
	return err
}

// Degraded returns why a healthy node (Healthy) runs short of what it should, or
// nil: on Kafka, that its event log cannot write, or does not answer, so that
// the tasks it takes wait on Kafka until the log writes again; or that it runs
// none of the tasks of partitions its group assigns it (stranded).
func (n *Node) Degraded() error {
	err, degraded := n.readiness()
	if err != nil {
		return nil
	}
	return degraded
}

// readiness is Healthy's outcome, and, when it is nil, Degraded's.
func (n *Node) readiness() (unhealthy, degraded error) {
	if n.closing() {
		return errStopping, nil
	}
	deadline := time.Now().Add(healthWait)
	var logDone, busDone <-chan struct{}
	if n.logProbe != nil {
		logDone = n.logProbe.start() // beside the host's: all within deadline
	}
	if n.busProbe != nil {
		busDone = n.busProbe.start()
	}
	if err := n.hostProbe.wait(n.hostProbe.start(), deadline); err != nil {
		return err, nil
	}
	if err := n.owner.refusal(); err != nil {
		return fmt.Errorf("new tasks and writes are refused: %w", err), nil
	}
	// Stranded partitions degrade the node, as a log that cannot write does: its
	// POST /v1/tasks still queues tasks on the bus, by partition whichever node
	// takes them, and it runs the partitions it still holds; a node of another
	// group takes every partition, so that a 503 would take every node of the
	// cluster out of a load balancer's rotation at once.
	stranded := n.stranded()
	if n.busProbe != nil {
		if err := n.busProbe.wait(busDone, deadline); err != nil {
			return err, nil
		}
	}
	if n.logProbe == nil {
		return nil, stranded
	}
	err := n.logProbe.wait(logDone, deadline)
	if err != nil && n.queuesTasks() {
		if stranded != nil {
			return nil, fmt.Errorf("%w; and %w", err, stranded)
		}
		return nil, err
	}
	if err != nil {
		return err, nil
	}
	return nil, stranded
}

// queuesTasks reports whether the node's ingress publishes new tasks on a bus of
// its configuration (Config.Bus: Kafka), which holds them while the event log
// cannot write, rather than handing them to its sessions itself, which refuses
// them then (deliverTask).
func (n *Node) queuesTasks() bool { return n.cfg.Bus != nil }

// BusReach is the optional capability of Bus.Publisher to tell whether its
// brokers can be reached (kafka.Publisher.Reachable): nil when they can, else
// why not, within a second or ctx. A node whose publisher is one is not ready
// (Healthy) while they cannot, since a new task could not be queued.
type BusReach interface {
	Reachable(ctx context.Context) error
}

// largeTasksRefused says, of a node on Kafka whose event log cannot write
// (Degraded), which new tasks it refuses all the same: those larger than a bus
// message, which go through the log (taskRef), get 503.
func largeTasksRefused() string {
	return fmt.Sprintf("but those over %d KiB, too large for a bus message, go through the log and are refused meanwhile", messages.BusMessageMax>>10)
}

// busReachable returns why a new task cannot be queued on the bus when its
// publisher can tell (BusReach) that its brokers cannot be reached, as /healthz
// says (the same check, cached: free while produces go through, else at most one
// check of the brokers a second, whose outcome the calls made meanwhile share),
// and nil otherwise. The ingress asks it before it publishes a task: a publish
// to brokers known to be down only waits out the producer's retries (seconds)
// to find the same, while its client waits.
func (n *Node) busReachable(ctx context.Context) error {
	if n.cfg.Bus == nil {
		return nil
	}
	r, ok := n.cfg.Bus.Publisher.(BusReach)
	if !ok {
		return nil
	}
	if err := r.Reachable(ctx); err != nil {
		return &busUnreachableError{err: err}
	}
	return nil
}

// ErrBusUnreachable is wrapped by the error of a task refused because the
// node's Kafka brokers are known to be out of reach (BusReach): nothing was
// recorded, and the task should be sent again in a few seconds (POST /v1/tasks
// answers 503 with Retry-After: busDownRetryAfter).
var ErrBusUnreachable = errors.New("the bus cannot be reached")

// busDownRetryAfter is the Retry-After, in seconds, of a task refused because
// the brokers cannot be reached: a check of them is at most a second old and
// takes at most a second, so a node knows of brokers back within two.
const busDownRetryAfter = 2

// busUnreachableError is ErrBusUnreachable with the reason the publisher gave,
// which its text is.
type busUnreachableError struct{ err error }

func (e *busUnreachableError) Error() string   { return e.err.Error() }
func (e *busUnreachableError) Unwrap() []error { return []error{ErrBusUnreachable, e.err} }

// Live returns nil unless the node is stopping or its session host does not
// answer: what a restart may cure, unlike an event log that cannot write or does
// not answer (Healthy), which Live does not ask. It answers within healthWait,
// but a host that answered its last probe counts as alive until its probe under
// way is overdue (healthTimeout): a host busy for more than healthWait, as under
// a burst of tasks on a small machine, gets the node no restart (a liveness
// probe that fails restarts the process, which loses the work in hand), while
// one that is stuck fails Live once its probe times out.
func (n *Node) Live() error {
	if n.closing() {
		return errStopping
	}
	return n.hostProbe.waitLenient(n.hostProbe.start(), time.Now().Add(healthWait))
}

// newHealthProbes builds the node's probes of its session host, of its event
// log when it has something to ask of it (probeLog), and of its bus when the
// bus's publisher can tell whether its brokers can be reached (BusReach). New calls it once the log
// is what the node writes (guardLog).
func (n *Node) newHealthProbes() {
	n.hostProbe = &healthProbe{what: "the session host", run: n.probeHost}
	_, health := n.log.(eventlog.Health)
	if health || (n.owner != nil && n.owner.owners != nil) {
		name := logBackend(n.log)
		if n.owner != nil {
			name = logBackend(n.owner.log)
		}
		n.logProbe = &healthProbe{what: "the event log (" + name + ")", run: n.probeLog}
	}
	if n.cfg.Bus != nil {
		if r, ok := n.cfg.Bus.Publisher.(BusReach); ok {
			n.busProbe = &healthProbe{what: "the bus", run: func(ctx context.Context) error {
				if err := r.Reachable(ctx); err != nil {
					return fmt.Errorf("new tasks cannot be queued on the bus, so they are refused: %w", err)
				}
				return nil
			}}
		}
	}
}

// probeHost asks the session host how many sessions it runs.
func (n *Node) probeHost(ctx context.Context) error {
	res, err := n.system.Root.RequestFuture(n.host, &actors.CountSessions{}, healthTimeout).Result()
	if err != nil {
		return fmt.Errorf("the session host is not running (no answer within %s: %w)", healthTimeout, err)
	}
	if _, ok := res.(int); !ok {
		return fmt.Errorf("the session host answered %T to a health check", res)
	}
	return nil
}

// probeLog asks the event log whether its writes go through (eventlog.Health),
// and, on a log the node owns whole, whether another node took it
// (logOwner.probe), which also tells whether the log answers a read.
func (n *Node) probeLog(ctx context.Context) error {
	if h, ok := n.log.(eventlog.Health); ok {
		if err := h.Writable(ctx); err != nil {
			n.outage.failed(err)
			if n.queuesTasks() {
				return fmt.Errorf("the event log cannot write, so new tasks wait on the bus until it can, %s: %w", largeTasksRefused(), err)
			}
			return fmt.Errorf("the event log cannot write, so new tasks are refused: %w", err)
		}
		n.outage.recovered()
	}
	if err := n.owner.probe(ctx); err != nil {
		if errors.Is(err, errLogTaken) {
			return fmt.Errorf("new tasks and writes are refused: %w", err)
		}
		return err
	}
	return nil
}

// healthProbe probes one dependency of the node for its health checks, one
// probe at a time. A check that finds no probe under way starts one, in the
// background and bounded by healthTimeout; the checks made while it runs share
// it. Each waits for its outcome until its own deadline, and past that answers
// that the dependency did not answer within healthWait, while the probe goes on
// until it ends or times out. So a dependency that hangs costs a check
// healthWait, not the probe's timeout (nor the timeout of whatever the probe's
// client ignores ctx for), and checks made faster than a probe ends start no
// more probes, goroutines or connections.
type healthProbe struct {
	what string // the dependency, for the error: "the session host"
	run  func(ctx context.Context) error

	mu      sync.Mutex
	running chan struct{} // closed once the probe under way ends; nil when none is
	began   time.Time     // when the probe under way began
	last    error         // the outcome of the last probe that ended
	ended   bool          // a probe ended: last is its outcome
}

// start returns a channel closed once the probe under way ends, starting one
// if none is.
func (p *healthProbe) start() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running != nil {
		return p.running
	}
	done := make(chan struct{})
	p.running, p.began = done, time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
		err := p.run(ctx)
		cancel()
		p.mu.Lock()
		p.last, p.ended, p.running = err, true, nil
		p.mu.Unlock()
		close(done)
	}()
	return done
}

// wait returns the outcome of the probe that closes done, or, if it has not
// ended by deadline, that the dependency did not answer.
func (p *healthProbe) wait(done <-chan struct{}, deadline time.Time) error {
	select {
	case <-done:
	default:
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			return fmt.Errorf("%s did not answer a probe within %s", p.what, healthWait)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// waitLenient is wait, except that past deadline a dependency whose last probe
// succeeded counts as answering until the probe under way has run for
// healthTimeout (when it times out and says so itself).
func (p *healthProbe) waitLenient(done <-chan struct{}, deadline time.Time) error {
	err := p.wait(done, deadline)
	if err == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running != nil && p.ended && p.last == nil && time.Since(p.began) < healthTimeout {
		return nil // busy, not overdue: its last probe went through
	}
	return err
}

// healthz serves GET /healthz, the readiness check: 200 when the node can run
// tasks, else 503 with the reason (Healthy), so that a load balancer, or
// Kubernetes' readiness probe, stops sending it work until it can. It answers
// within healthWait (half a second) whatever hangs.
//
// A node that is healthy but degraded (Degraded: on Kafka, its event log cannot
// write, or its group left it holding partitions another node took) answers 200
// {"status": "degraded", "reason": ...}: it takes tasks, which wait on Kafka
// until the log writes again, or until the partitions' owner runs them.
// troupe_node_degraded follows the log's outage (logOutage), whether or not
// anything asks /healthz.
func (n *Node) healthz(w http.ResponseWriter, r *http.Request) {
	err, degraded := n.readiness()
	if err == nil && degraded != nil {
		writeJSON(w, http.StatusOK, map[string]string{"status": "degraded", "reason": degraded.Error()})
		return
	}
	writeHealth(w, err)
}

// livez serves GET /livez, the liveness check: 503 only for what a restart may cure
// (Live), so that a full disk, or a ClickHouse that is down or hangs, does not get
// the node killed in a loop. It answers within healthWait whatever hangs.
func (n *Node) livez(w http.ResponseWriter, r *http.Request) {
	writeHealth(w, n.Live())
}

func writeHealth(w http.ResponseWriter, err error) {
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
