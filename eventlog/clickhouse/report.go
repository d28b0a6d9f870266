package clickhouse

import (
	"context"
	"fmt"

	"github.com/troupe-run/troupe/eventlog"
)

var _ eventlog.Analytics = (*Log)(nil)

// deduped is the events at or after a time as a reader of the log folds them: one
// row per (session, seq), that of the highest epoch, even before
// ReplacingMergeTree merged a duplicate away, and none that Read leaves out
// (staleRows), each with the agent of its task (taskAgent). The analytics views
// of schema/0011_analytics_per_task.sql count the same rows. Each joined subquery
// has an alias, which nothing refers to: current releases of ClickHouse refuse a
// joined subquery without one (joined_subquery_requires_alias).
// Parameter: since.
const deduped = `(SELECT session_id, seq, e_type AS type, e_ts AS ts, e_payload AS payload, ` + taskAgent + ` AS agent FROM
	(SELECT session_id, seq, argMax(type, epoch) AS e_type, argMax(ts, epoch) AS e_ts, argMax(payload, epoch) AS e_payload,
	        max(epoch) AS e_epoch
	 FROM events WHERE ts >= ? GROUP BY session_id, seq) AS latest
	ANY LEFT JOIN ` + taskAgents + ` AS task_agents USING session_id
	WHERE (session_id, seq, e_epoch) NOT IN (` + staleRows + `))`

// forkSeqs is, per fork, the seq of its session.forked event (fork_at; 0 for a
// session that is no fork, as the join leaves it): the events before it are its
// parent's, copied with their times, and a fork's steps and duration count from
// it (eventlog.SessionUsage), and so do its model calls, tool calls and memory
// operations (ownCalls). A fork of a fork holds its parent's event too, before
// its own: the last one is its own.
const forkSeqs = `(SELECT session_id, max(seq) AS fork_at FROM events WHERE type = 'session.forked' GROUP BY session_id)`

// ownEvents is deduped with, per event, its session's fork_at (forkSeqs), for
// a condition seq > fork_at: the events a session made itself, not those a
// fork copied from its parent.
const ownEvents = deduped + ` AS d ANY LEFT JOIN ` + forkSeqs + ` AS forks USING session_id`

// taskAgents is, per session, the seqs of its tasks (task.submitted, as Read
// returns them) and their agents ("default" for a task that named none), as two
// arrays in the same order: ClickHouse 18.16 has no join on an inequality, which
// charging each event to its task's agent takes.
const taskAgents = `(SELECT session_id, groupArray(seq) AS t_seqs,
		groupArray(if(visitParamExtractString(t_payload, 'agent') = '', 'default', visitParamExtractString(t_payload, 'agent'))) AS t_agents
	FROM (SELECT session_id, seq, argMax(payload, epoch) AS t_payload, max(epoch) AS t_epoch
	      FROM events WHERE type = 'task.submitted' GROUP BY session_id, seq)
	WHERE (session_id, seq, t_epoch) NOT IN (` + staleRows + `)
	GROUP BY session_id)`

// taskAgent is the agent of an event (columns seq, t_seqs and t_agents of
// taskAgents): that of the latest task submitted at or before it, or of the
// session's first task for an event before any; "" in a session without tasks.
const taskAgent = `if(arrayCount(s -> s <= seq, t_seqs) = 0, arrayReduce('argMin', t_agents, t_seqs),
	arrayReduce('argMax', arrayFilter((a, s) -> s <= seq, t_agents, t_seqs), arrayFilter(s -> s <= seq, t_seqs)))`

// staleRows is the rows of events that fenced_events lists and Read leaves out
// (a stale partition owner's, see the package doc's Fencing): those beside a row
// of a higher epoch at their seq, and those after the last row of their session
// that fenced_events does not list (no owner wrote after them). A listed row
// that another owner wrote after was read by that owner, and counts. It reads
// the events of the sessions that fenced_events lists only.
const staleRows = `SELECT session_id, seq, epoch FROM
		(SELECT session_id, seq, epoch, top FROM fenced_events
		 ANY LEFT JOIN (SELECT session_id, seq, max(epoch) AS top FROM events
		                WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq) AS tops
		 USING session_id, seq) AS listed
	ANY LEFT JOIN (SELECT session_id, max(seq) AS kept
	               FROM (SELECT session_id, seq, max(epoch) AS top FROM events
	                     WHERE session_id IN (SELECT session_id FROM fenced_events) GROUP BY session_id, seq)
	               WHERE (session_id, seq, top) NOT IN (SELECT session_id, seq, epoch FROM fenced_events)
	               GROUP BY session_id) AS kept_seqs
	USING session_id
	WHERE epoch < top OR seq > kept`

// notNotes keeps the sessions, not the notes streams, the memory namespaces, the knowledge bases, the A2A push configs nor the dashboard's sign-ins
// (eventlog.IsSession), with substring, which ClickHouse 18.16 has as every later
// version does.
var notNotes = eventlog.NotPrefixed("substring", "session_id")

// Report implements eventlog.Analytics with SQL over the events table; payload fields
// are read with visitParamExtract*, which ClickHouse 18.16 and current versions have.
func (l *Log) Report(ctx context.Context, f eventlog.StatsFilter) (*eventlog.Stats, error) {
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/clickhouse: stats: %w", eventlog.ErrClosed)
	}
	if err := f.CheckSeries(); err != nil {
		return nil, err
	}
	qctx, cancel := context.WithTimeout(ctx, l.cfg.QueryTimeout)
	defer cancel()
	s := &eventlog.Stats{}
	args := []any{f.SinceUS, f.Agent, f.Agent}
	agentCond := `(? = '' OR agent = ?)`
	query := func(q string, scan func(scan func(...any) error) error) error {
		rows, err := l.conn.Query(qctx, q, args...)
		if err != nil {
			return fmt.Errorf("eventlog/clickhouse: stats: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows.Scan); err != nil {
				return fmt.Errorf("eventlog/clickhouse: stats: %w", err)
			}
		}
		return rows.Err()
	}
	// A fork's calls and memory operations are those after its session.forked
	// event (ownEvents): its parent's, copied, are its parent's.
	err := query(`SELECT toString(toDate(toDateTime(intDiv(ts, 1000000)))) AS day, agent,
			visitParamExtractString(payload, 'model') AS model, count(),
			sum(visitParamExtractInt(payload, 'prompt_tokens')), sum(visitParamExtractInt(payload, 'completion_tokens')),
			sum(visitParamExtractInt(payload, 'cached_tokens')), sum(visitParamExtractFloat(payload, 'cost_usd'))
		FROM `+ownEvents+` WHERE type = 'model.responded' AND seq > fork_at AND `+agentCond+`
		GROUP BY day, agent, model`,
		func(scan func(...any) error) error {
			var m eventlog.ModelUsage
			var calls uint64
			if err := scan(&m.Day, &m.Agent, &m.Model, &calls, &m.PromptTokens, &m.CompletionTokens, &m.CachedTokens, &m.CostUSD); err != nil {
				return err
			}
			m.Calls = int64(calls)
			s.Models = append(s.Models, m)
			return nil
		})
	if err != nil {
		return nil, err
	}
	err = query(`SELECT visitParamExtractString(payload, 'tool') AS tool, count(),
			countIf(visitParamExtractString(payload, 'error') != ''),
			quantileExact(0.5)(visitParamExtractInt(payload, 'latency_us')),
			quantileExact(0.95)(visitParamExtractInt(payload, 'latency_us'))
		FROM `+ownEvents+` WHERE type = 'tool.completed' AND seq > fork_at AND `+agentCond+`
		GROUP BY tool`,
		func(scan func(...any) error) error {
			var t eventlog.ToolUsage
			var calls, errs uint64
			if err := scan(&t.Tool, &calls, &errs, &t.P50US, &t.P95US); err != nil {
				return err
			}
			t.Calls, t.Errors = int64(calls), int64(errs)
			t.ErrorRate = float64(errs) / float64(calls)
			s.Tools = append(s.Tools, t)
			return nil
		})
	if err != nil {
		return nil, err
	}
	// A session is running while it has more tasks than ends (eventlog.SessionStatus).
	// A fork's steps and duration count from its session.forked event (forkSeqs).
	err = query(`SELECT agent, count(), countIf(status = 'task.completed' AND n_tasks <= n_ended),
			countIf(status = 'task.failed' AND n_tasks <= n_ended),
			avg(steps), quantileExact(0.5)(duration), quantileExact(0.95)(duration)
		FROM (SELECT session_id, argMin(agent, seq) AS agent, argMaxIf(type, seq, type LIKE 'task.%') AS status,
		             countIf(type = 'task.submitted') AS n_tasks, countIf(type IN ('task.completed', 'task.failed')) AS n_ended,
		             countIf(type = 'model.requested' AND seq > fork_at) AS steps,
		             max(ts) - if(countIf(seq >= fork_at) = 0, min(ts), minIf(ts, seq >= fork_at)) AS duration
		      FROM `+ownEvents+`
		      WHERE `+notNotes+` GROUP BY session_id)
		WHERE `+agentCond+` GROUP BY agent`,
		func(scan func(...any) error) error {
			var a eventlog.SessionUsage
			var n, completed, failed uint64
			if err := scan(&a.Agent, &n, &completed, &failed, &a.AvgSteps, &a.P50DurationUS, &a.P95DurationUS); err != nil {
				return err
			}
			a.Sessions, a.Completed, a.Failed = int64(n), int64(completed), int64(failed)
			a.Running = a.Sessions - a.Completed - a.Failed
			s.Sessions = append(s.Sessions, a)
			return nil
		})
	if err != nil {
		return nil, err
	}
	err = query(`SELECT visitParamExtractString(payload, 'tier') AS tier, substring(type, 8) AS op, count()
		FROM `+ownEvents+` WHERE type LIKE 'memory.%' AND seq > fork_at AND `+agentCond+` GROUP BY tier, op`,
		func(scan func(...any) error) error {
			var m eventlog.MemoryOps
			var n uint64
			if err := scan(&m.Tier, &m.Op, &n); err != nil {
				return err
			}
			m.Count = int64(n)
			s.Memory = append(s.Memory, m)
			return nil
		})
	if err != nil {
		return nil, err
	}
	if f.Buckets > 0 {
		// The series' buckets (eventlog.SeriesBucket), each as its number from 0.
		s.Series = f.Series()
		err = query(fmt.Sprintf(`SELECT intDiv(ts - %[1]d, %[3]d) AS bucket,
				sumIf(visitParamExtractInt(payload, 'prompt_tokens') + visitParamExtractInt(payload, 'completion_tokens'), type = 'model.responded'),
				sumIf(visitParamExtractFloat(payload, 'cost_usd'), type = 'model.responded'),
				countIf(type = 'tool.completed'),
				sumIf(visitParamExtractInt(payload, 'latency_us'), type = 'tool.completed'),
				maxIf(visitParamExtractInt(payload, 'latency_us'), type = 'tool.completed'),
				countIf(type = 'task.failed' OR type IN ('model.responded', 'tool.completed') AND visitParamExtractString(payload, 'error') != '')
			FROM `+ownEvents+` WHERE type IN ('model.responded', 'tool.completed', 'task.failed') AND seq > fork_at AND ts < %[2]d AND `+agentCond+`
			GROUP BY bucket`, f.SinceUS, f.UntilUS, f.BucketUS()),
			func(scan func(...any) error) error {
				var i, tokens, latency, maxUS int64
				var cost float64
				var calls, errs uint64
				if err := scan(&i, &tokens, &cost, &calls, &latency, &maxUS, &errs); err != nil {
					return err
				}
				if i < 0 || i >= int64(len(s.Series)) {
					return nil
				}
				b := &s.Series[i]
				b.Tokens, b.CostUSD, b.ToolCalls, b.ToolLatencyUS, b.ToolLatencyMaxUS, b.Errors = tokens, cost, int64(calls), latency, maxUS, int64(errs)
				return nil
			})
		if err != nil {
			return nil, err
		}
	}
	s.Sort()
	return s, nil
}
