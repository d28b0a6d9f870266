package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog"
)

// healthTimeout bounds how long a health check waits for the session host, or for
// the event log's probe write, to answer.
const healthTimeout = 2 * time.Second

// Healthy returns nil when the node can run tasks, or why it cannot: it is stopping;
// its session host does not answer (it stopped, or it is stuck), in which case
// tasks submitted to it would wait in vain for their sessions; or its event log
// cannot write (a full disk: eventlog.ErrFull), in which case it refuses every new
// task. The last goes by the log's last write where the log can tell
// (eventlog.Health: the SQLite log), which costs nothing while writes go through;
// once one failed, the log tries a small write of its own, at most once a second,
// so that the node is healthy again once space is freed, whether or not a session
// wrote since.
//
// A node that is unhealthy only for its log is alive (Live): restarting it would
// not free space.
func (n *Node) Healthy() error {
	if err := n.Live(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	if n.owner != nil {
		if err := n.owner.probe(ctx); err != nil {
			return fmt.Errorf("new tasks and writes are refused: %w", err)
		}
	}
	h, ok := n.log.(eventlog.Health)
	if !ok {
		return nil
	}
	if err := h.Writable(ctx); err != nil {
		n.outage.failed(err)
		return fmt.Errorf("the event log cannot write, so new tasks are refused: %w", err)
	}
	n.outage.recovered()
	return nil
}

// Live returns nil unless the node is stopping or its session host does not answer:
// what a restart may cure, unlike an event log that cannot write (Healthy).
func (n *Node) Live() error {
	if n.closing() {
		return errors.New("the node is stopping")
	}
	res, err := n.system.Root.RequestFuture(n.host, &actors.CountSessions{}, healthTimeout).Result()
	if err != nil {
		return fmt.Errorf("the session host is not running (no answer within %s: %w)", healthTimeout, err)
	}
	if _, ok := res.(int); !ok {
		return fmt.Errorf("the session host answered %T to a health check", res)
	}
	return nil
}

// healthz serves GET /healthz, the readiness check: 200 when the node can run
// tasks, else 503 with the reason (Healthy), so that a load balancer, or
// Kubernetes' readiness probe, stops sending it work until it can.
func (n *Node) healthz(w http.ResponseWriter, r *http.Request) {
	writeHealth(w, n.Healthy())
}

// livez serves GET /livez, the liveness check: 503 only for what a restart may cure
// (Live), so that a full disk does not get the node killed in a loop.
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
