package node

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/troupe-run/troupe/actors"
)

// healthTimeout bounds how long a health check waits for the session host to answer.
const healthTimeout = 2 * time.Second

// Healthy returns nil when the node can run tasks, or why it cannot: it is stopping,
// or its session host does not answer (it stopped, or it is stuck), in which case
// tasks submitted to it would wait in vain for their sessions.
func (n *Node) Healthy() error {
	select {
	case <-n.stopping:
		return errors.New("the node is stopping")
	default:
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

// healthz serves GET /healthz: 200 when the node can run tasks, else 503 with the
// reason, so that a load balancer or supervisor stops sending it work.
func (n *Node) healthz(w http.ResponseWriter, r *http.Request) {
	if err := n.Healthy(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
