package node

import (
	"cmp"
	"net/http"
	"path/filepath"

	"github.com/troupe-run/troupe/internal/lockpid"
)

// StartingRetryAfter is the Retry-After, in seconds, of the 503 a node that is
// starting answers (StartingHandler).
const StartingRetryAfter = "1"

// StartingHandler answers the node's HTTP API while New, given cfg, has not
// returned yet: a server listens first (so that a node started by mistake on the
// address another serves fails at once), and New may wait up to Config.LockWait
// for a lock of the data directory that another process holds (the node before
// it, still stopping). Meanwhile GET /livez answers 200 (the process is alive: a
// restart cures nothing, and one that a liveness probe got by timing out would
// start the wait again), GET /healthz 503 with the reason, "the node is
// starting: waiting for the data lock held by pid N (PATH)" when another live
// process holds one, and every other request 503 with the same reason and a
// Retry-After.
func StartingHandler(cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			switch r.URL.Path {
			case "/livez":
				writeHealth(w, nil)
				return
			case "/healthz":
				w.Header().Set("Retry-After", StartingRetryAfter)
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unhealthy", "reason": startingReason(cfg)})
				return
			}
		}
		w.Header().Set("Retry-After", StartingRetryAfter)
		writeError(w, http.StatusServiceUnavailable, "%s: try again in a moment", startingReason(cfg))
	})
}

// startingReason says why a node is not serving yet: the lock New waits for, if
// another live process holds one of the data directory's (the event log's, the
// memory and knowledge vectors'), as its lock file names it.
func startingReason(cfg Config) string {
	dir := cmp.Or(cfg.DataDir, ".troupe") // New's default (setDefaults)
	cluster := cfg.Bus != nil
	for _, path := range []string{
		filepath.Join(dir, "LOCK"),
		MemoryVectorsPath(dir, cluster, cfg.NodeID) + ".lock",
		KnowledgeVectorsPath(dir, cluster, cfg.NodeID) + ".lock",
	} {
		if h := lockpid.Read(path); h.PID > 0 && !h.This() && h.Live() {
			return "the node is starting: waiting for the data lock held by " + h.String() + " (" + path + ")"
		}
	}
	return "the node is starting"
}
