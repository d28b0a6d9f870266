package node

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// getStats serves GET /v1/stats?since=&agent=: the figures `replay stats --json`
// prints (eventlog.Analytics.Report) — tokens and cost by day, agent and model;
// calls, errors and latency by tool; sessions by agent; memory operations. since
// is a duration back from now (24h) or a date (eventlog.ParseSince); agent keeps
// one agent's sessions ("default" for tasks that named none).
func (n *Node) getStats(w http.ResponseWriter, r *http.Request) {
	a, ok := n.log.(eventlog.Analytics)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this node's event log has no analytics")
		return
	}
	q := r.URL.Query()
	now := time.Now()
	since, err := eventlog.ParseSince(q.Get("since"), now)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	f := eventlog.StatsFilter{SinceUS: since, Agent: q.Get("agent")}
	if v := q.Get("buckets"); v != "" {
		// The dashboard's charts: the range to now in buckets, summed by the log,
		// rather than every event of the range read by the page.
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > eventlog.MaxBuckets {
			writeError(w, http.StatusBadRequest, "buckets %q: want a number from 1 to %d", v, eventlog.MaxBuckets)
			return
		}
		if since == 0 {
			writeError(w, http.StatusBadRequest, "buckets needs since: the range to cut into buckets")
			return
		}
		f.Buckets, f.UntilUS = n, now.UnixMicro()
		if err := f.CheckSeries(); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	if r.Method == http.MethodHead {
		// A HEAD (a monitor's check) gets the answer's headers: net/http
		// discards a HEAD answer's body, and the report, a scan of the log's
		// events since since, would be computed only to be dropped. The log
		// is asked for one session's summary, so that a log that is down
		// answers the GET's 500, not a 200 a monitor would read as served.
		if _, err := n.log.Sessions(r.Context(), eventlog.Filter{Limit: 1}); err != nil {
			writeError(w, http.StatusInternalServerError, "stats: %v", err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		return
	}
	s, err := a.Report(r.Context(), f)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "stats: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// SessionRow is a session as GET /v1/sessions?detail=true lists it: its summary,
// the agent of its first task, what its model calls used and the calls that wait
// for approval.
type SessionRow struct {
	eventlog.SessionInfo
	// Agent is the agent its first task named ("default" for none); "" for a
	// stream of the log that is no session.
	Agent string `json:"agent,omitempty"`
	// Usage sums the usage of its model calls (model.responded events).
	Usage messages.Usage `json:"usage"`
	// Waiting names the tool of each call of its running task that waits for a
	// human's approval, in the order they were requested (GET /v1/approvals lists
	// the calls); absent when none waits. A call leaves it when it is answered
	// (approval.resolved) or the task ends (a cancel fails it).
	Waiting []string `json:"waiting,omitempty"`
}

// sessionRows reads each listed session's events for its agent, usage and the calls
// waiting for approval.
func (n *Node) sessionRows(ctx context.Context, infos []eventlog.SessionInfo) ([]SessionRow, error) {
	rows := make([]SessionRow, len(infos))
	for i, info := range infos {
		rows[i].SessionInfo = info
		if !eventlog.IsSession(info.ID) {
			continue
		}
		f, err := n.feed.current(ctx, n.log, info.ID)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", info.ID, err)
		}
		rows[i].Agent, rows[i].Usage, rows[i].Waiting = f.row.Agent, f.row.Usage, f.waitingTools()
	}
	return rows, nil
}
