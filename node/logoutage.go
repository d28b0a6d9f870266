package node

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-run/troupe/eventlog"
)

// outageProbeEvery is how often, during an outage of the event log, the node asks a
// log that can tell (eventlog.Health) whether its writes go through again.
const outageProbeEvery = time.Second

// logOutage tells an outage of the event log's writes (a full disk, a log that is
// down) once: a warning when the first write fails, with its cause, and a line
// when writes go through again, with how long it lasted and how many writes
// waited, where every session used to log every attempt (100 sessions stuck on a
// full disk: 100 lines every 5 s). It keeps troupe_eventlog_writes_failing (1
// during an outage), and on Kafka troupe_node_degraded (1 during an outage: the
// node takes tasks, which wait there), and counts each failed attempt in
// troupe_eventlog_write_failures_total.
//
// It hears the sessions' writes (actors.SessionDeps.LogWrites) and the health
// check's (Node.Healthy). An outage ends at the first write that goes through; on a
// log that can tell (eventlog.Health) it also ends once the log says so, which the
// node asks every outageProbeEvery during the outage: so that it ends when space
// comes back although no session writes (their writes were refused, or they
// stopped).
type logOutage struct {
	logger   *slog.Logger
	health   eventlog.Health // the log's, nil when it cannot tell
	stopping <-chan struct{}
	failing  prometheus.Gauge
	failures prometheus.Counter
	// queued says that the node's new tasks wait on its bus (Kafka) during an
	// outage rather than being refused (Node.queuesTasks), for its warning and
	// degraded.
	queued bool
	// degraded is troupe_node_degraded: 1 during an outage when queued.
	degraded prometheus.Gauge

	down atomic.Bool // read on every append: the rest only during an outage
	mu   sync.Mutex
	// since and cause are when the outage started and its first failure; waited
	// and refused count the writes whose first attempt failed during it, which
	// their sessions retried, and the new tasks refused.
	since           time.Time
	cause           error
	waited, refused int
	watching        bool // a goroutine asks health (watch)
}

func newLogOutage(logger *slog.Logger, log eventlog.Log, stopping <-chan struct{}, m *Metrics) *logOutage {
	o := &logOutage{logger: logger, stopping: stopping, failing: m.logFailing, failures: m.logFailures, degraded: m.degraded}
	o.health, _ = log.(eventlog.Health)
	return o
}

// wrote is actors.SessionDeps.LogWrites: how an attempt of a session's write went.
func (o *logOutage) wrote(attempt int, err error, retried bool) {
	if err == nil {
		if o.down.Load() {
			o.recovered()
		}
		return
	}
	o.failures.Inc()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failedLocked(err)
	if attempt == 1 {
		if retried {
			o.waited++
		} else {
			o.refused++
		}
	}
}

// failed records a failed write (the health check's): it starts an outage if none
// is under way.
func (o *logOutage) failed(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failedLocked(err)
}

func (o *logOutage) failedLocked(err error) {
	if o.down.Load() {
		return
	}
	o.down.Store(true)
	o.since, o.cause, o.waited, o.refused = time.Now(), err, 0, 0
	o.failing.Set(1)
	tasks := "new tasks are refused"
	if o.queued {
		tasks = "new tasks wait on the bus, " + largeTasksRefused() + ","
		o.degraded.Set(1)
	}
	o.logger.Warn("event log writes fail: "+tasks+" and sessions wait, retrying their writes, until one goes through (logged once; each attempt at debug level)", "err", err)
	if o.health != nil && !o.watching {
		o.watching = true
		go o.watch()
	}
}

// admit reports whether a new task may go to its session: nil on a log that
// cannot tell (eventlog.Health) and while the log's writes go through (an atomic
// load of the log's); while they fail, why, and the task counts as refused. The
// log learns that its writes go through again at most once a second
// (eventlog.Health), so a task may be refused for up to that long after an outage.
func (o *logOutage) admit(ctx context.Context) error {
	if o.health == nil {
		return nil
	}
	err := o.health.Writable(ctx)
	if err == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failedLocked(err)
	o.refused++
	return err
}

// recovered ends the outage under way, if any: a write went through.
func (o *logOutage) recovered() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		return
	}
	o.down.Store(false)
	o.failing.Set(0)
	o.degraded.Set(0)
	o.logger.Info("event log writes go through again", "outage", time.Since(o.since).Round(time.Millisecond),
		"writes_waited", o.waited, "tasks_refused", o.refused, "cause", o.cause)
	o.cause = nil
}

// watch asks the log whether its writes go through, every outageProbeEvery while
// an outage lasts, and ends it once they do.
func (o *logOutage) watch() {
	t := time.NewTicker(outageProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-o.stopping:
			o.mu.Lock()
			o.watching = false
			o.mu.Unlock()
			return
		case <-t.C:
		}
		o.mu.Lock()
		if !o.down.Load() {
			o.watching = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
		err := o.health.Writable(ctx)
		cancel()
		if err == nil {
			o.recovered()
		}
	}
}
