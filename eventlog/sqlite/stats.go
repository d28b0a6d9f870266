package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

var _ eventlog.Analytics = (*Log)(nil)

// taskSeqAgent is a task.submitted event's seq, zero-padded so that text order is
// seq order, followed by its agent ("" when it named none); NULL for other events.
var taskSeqAgent = `CASE WHEN type = 'task.submitted' THEN printf('%020d', seq) || COALESCE(` + payloadField("events", "$.agent") + `, '') END`

// eventsWithAgent is the events of the types cond keeps, and the sessions' tasks
// (with their payload when payload), each with its agent column: the agent of its
// own task, the latest one submitted at or before it, else (an event before any
// task) of the session's first task; "default" for a task that named none, "" in
// a stream without tasks (a memory namespace, a session with no task.submitted).
// The ClickHouse log charges each event so too (its taskAgent), so that both
// report the same figures. Window functions over the primary key's order find each
// event's task in one pass over the session, where a lookup per event would scan
// back over the session's events to its task.
//
// Its at column is, of a fork, the seq of its session.forked event (a fork of a
// fork holds its parent's too, before its own: the last one is its own); NULL for
// a session that is no fork. A fork's events before it are its parent's, copied
// with their times: its model calls, tool calls and memory operations, steps and
// duration count from it (ownEvent), and those of a session that is no fork from
// its first event. The same pass finds it: a subquery joined to each query
// scanned the events once more.
//
// Of the recent queries (recent, Report's with a range's start), it reads the
// sessions with events at or after the range's start only (sessionsSince), by
// the primary key, and takes sessionsSince's parameters first: a query counts
// the events of the range only, and an event's agent and fork are those the
// whole of its session gives it, which these sessions' events give it all.
func eventsWithAgent(cond string, payload, recent bool) string {
	cols := "session_id, seq, type, ts"
	if payload {
		cols += ", payload"
	}
	where := ""
	if recent {
		where = sessionsSince
	}
	return `(SELECT ` + cols + `, CASE WHEN task IS NULL THEN '' ELSE COALESCE(NULLIF(substr(task, 21), ''), 'default') END AS agent, at
	FROM (SELECT ` + cols + `, COALESCE(
		max(` + taskSeqAgent + `) OVER (PARTITION BY session_id ORDER BY seq ROWS UNBOUNDED PRECEDING),
		min(` + taskSeqAgent + `) OVER (PARTITION BY session_id)) AS task,
		max(CASE WHEN type = 'session.forked' THEN seq END) OVER (PARTITION BY session_id) AS at
	FROM events WHERE (type IN ('task.submitted', 'session.forked') OR ` + cond + `)` + where + `)) e`
}

// sessionsSince keeps the events of the sessions whose summary row (table
// sessions) says they have an event at or after its first parameter, its
// updated_us being the latest time of the session's events, as a prune reads
// it; and those of the sessions with events past rowid its second parameter:
// the record of the summaries that lag their events (lagMark, lag.go), whose
// rows may not say so yet, MaxInt64 when none lag. It reads the summaries, a
// row per stream, and the events past the record by rowid, where a scan read
// every event the log holds, the range's or not.
const sessionsSince = ` AND session_id IN (SELECT session_id FROM sessions WHERE updated_us >= ?
		UNION SELECT session_id FROM events NOT INDEXED WHERE rowid > ?)`

// ownEvent keeps the events a session made itself: of a fork, those after its
// session.forked event (eventsWithAgent's at).
const ownEvent = `e.seq > COALESCE(e.at, 0)`

// eventNotNotes keeps the events of sessions, not the notes streams, the memory namespaces, the knowledge bases, the A2A push configs nor the dashboard's sign-ins
// (eventlog.IsSession).
var eventNotNotes = eventlog.NotPrefixed("substr", "e.session_id")

// Report's queries over every session (recent false: the range's start, if any,
// filters the events only), each given the range's start (µs) and the agent
// ("": all) twice. Each reads the events in one pass (eventsWithAgent).
var (
	reportModels   = modelsQuery(false)
	reportTools    = toolsQuery(false)
	reportSessions = sessionsQuery(false)
	reportMemory   = memoryQuery(false)
)

// reportQueries is Report's queries, its series aside (reportSeries).
type reportQueries struct {
	models, tools, sessions, memory string
	recent                          bool // given sessionsSince's parameters first
}

// wholeReport reads every session; recentReport those with events at or after
// the range's start only (sessionsSince).
var (
	wholeReport  = reportQueries{reportModels, reportTools, reportSessions, reportMemory, false}
	recentReport = reportQueries{modelsQuery(true), toolsQuery(true), sessionsQuery(true), memoryQuery(true), true}
)

// eventWhere charges the calls to the agent of their own task
// (eventsWithAgent), and a fork with its own calls only, not its parent's
// that it copied (ownEvent).
const eventWhere = ownEvent + ` AND e.ts >= ? AND (? = '' OR e.agent = ?)`

// modelsQuery is the model calls by day, agent and model.
func modelsQuery(recent bool) string {
	return `SELECT date(e.ts / 1000000, 'unixepoch'), e.agent, COALESCE(` + payloadField("e", "$.model") + `, ''),
			count(*), total(` + payloadField("e", "$.usage.prompt_tokens") + `),
			total(` + payloadField("e", "$.usage.completion_tokens") + `),
			total(` + payloadField("e", "$.usage.cached_tokens") + `),
			total(` + payloadField("e", "$.usage.cost_usd") + `)
		FROM ` + eventsWithAgent("type = 'model.responded'", true, recent) + ` WHERE e.type = 'model.responded' AND ` + eventWhere + ` GROUP BY 1, 2, 3`
}

// toolsQuery is each tool call: its tool, latency and failure.
func toolsQuery(recent bool) string {
	return `SELECT COALESCE(` + payloadField("e", "$.tool") + `, ''), COALESCE(` + payloadField("e", "$.latency_us") + `, 0),
			COALESCE(` + payloadField("e", "$.error") + `, '') != ''
		FROM ` + eventsWithAgent("type = 'tool.completed'", true, recent) + ` WHERE e.type = 'tool.completed' AND ` + eventWhere
}

// sessionsQuery is each session of the range: one with events in it, counted
// from those events, as the ClickHouse log counts it: its agent is that of its
// first event there (eventsWithAgent), its status that of its latest task.*
// event there, running while more tasks were submitted there than ended; its
// steps and duration are those of the range, and of a fork those from its
// session.forked event on (the events before it are its parent's, copied with
// their times: counted, a fork made minutes after its parent lasted those
// minutes).
func sessionsQuery(recent bool) string {
	return `SELECT agent, status, steps, duration FROM
		(SELECT substr(min(printf('%020d', e.seq) || e.agent), 21) AS agent,
		        CASE WHEN sum(e.type = 'task.submitted') <= sum(e.type IN ('task.completed', 'task.failed'))
		             THEN COALESCE(substr(max(CASE WHEN e.type LIKE 'task.%' THEN printf('%020d', e.seq) || e.type END), 21), '') ELSE '' END AS status,
		        sum(e.type = 'model.requested' AND ` + ownEvent + `) AS steps,
		        max(e.ts) - COALESCE(min(CASE WHEN e.seq >= COALESCE(e.at, 0) THEN e.ts END), min(e.ts)) AS duration
		 FROM ` + eventsWithAgent("1", false, recent) + `
		 WHERE e.ts >= ? AND ` + eventNotNotes + ` GROUP BY e.session_id)
		WHERE ? = '' OR agent = ?`
}

// memoryQuery is the memory operations by tier and op. A memory write names
// its tier in its memory (memory.tier), a clear at the top: ClickHouse's
// visitParamExtractString finds either.
func memoryQuery(recent bool) string {
	return `SELECT COALESCE(` + payloadField("e", "$.memory.tier") + `, ` + payloadField("e", "$.tier") + `, ''), substr(e.type, 8), count(*)
		FROM ` + eventsWithAgent("type LIKE 'memory.%'", true, recent) + ` WHERE e.type LIKE 'memory.%' AND ` + eventWhere + ` GROUP BY 1, 2`
}

// reportSeries is the figures of a series' buckets (eventlog.SeriesBucket), the
// events from since to until in buckets of width µs, each as its number from 0.
// Of recentReport, it reads the sessions with events at or after since only.
func reportSeries(since, until, width int64, recent bool) string {
	errorField := `COALESCE(` + payloadField("e", "$.error") + `, '') != ''`
	return fmt.Sprintf(`SELECT (e.ts - %[1]d) / %[3]d,
			total(CASE WHEN e.type = 'model.responded' THEN COALESCE(`+payloadField("e", "$.usage.prompt_tokens")+`, 0) + COALESCE(`+payloadField("e", "$.usage.completion_tokens")+`, 0) END),
			total(CASE WHEN e.type = 'model.responded' THEN `+payloadField("e", "$.usage.cost_usd")+` END),
			sum(e.type = 'tool.completed'),
			total(CASE WHEN e.type = 'tool.completed' THEN `+payloadField("e", "$.latency_us")+` END),
			COALESCE(max(CASE WHEN e.type = 'tool.completed' THEN `+payloadField("e", "$.latency_us")+` END), 0),
			sum(e.type = 'task.failed' OR e.type IN ('model.responded', 'tool.completed') AND `+errorField+`)
		FROM `+eventsWithAgent("type IN ('model.responded', 'tool.completed', 'task.failed')", true, recent)+`
		WHERE e.type IN ('model.responded', 'tool.completed', 'task.failed') AND `+eventWhere+` AND e.ts < %[2]d
		GROUP BY 1`, since, until, width)
}

// Report implements eventlog.Analytics with SQL over the events table (JSON payloads
// read with json_extract, payloadField); quantiles are computed from the fetched latencies.
// A range's stats read the sessions with events in it only (recentReport).
func (l *Log) Report(ctx context.Context, f eventlog.StatsFilter) (*eventlog.Stats, error) {
	return l.report(ctx, f, f.SinceUS != 0)
}

// report is Report, with the queries of recentReport if recent, of
// wholeReport otherwise.
func (l *Log) report(ctx context.Context, f eventlog.StatsFilter, recent bool) (*eventlog.Stats, error) {
	if l.isClosed() {
		return nil, fmt.Errorf("eventlog/sqlite: stats: %w", eventlog.ErrClosed)
	}
	since := f.SinceUS
	if since == 0 {
		since = math.MinInt64
	}
	if err := f.CheckSeries(); err != nil {
		return nil, err
	}
	// The queries read one snapshot of the log, in which the record of the
	// summaries that lag, if any, names the sessions whose rows may lag
	// (sessionsSince).
	tx, err := l.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, l.readErr("stats", err)
	}
	defer tx.Rollback() //nolint:errcheck // a read transaction: nothing to undo
	qs, args := wholeReport, []any{since, f.Agent, f.Agent}
	if recent {
		from, lagging, err := lagMark(ctx, tx)
		if err != nil {
			return nil, l.readErr("stats", err)
		}
		if !lagging {
			from = math.MaxInt64
		}
		qs, args = recentReport, []any{since, from, since, f.Agent, f.Agent}
	}
	s := &eventlog.Stats{}
	q := func(query string, scan func(scan func(...any) error) error) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("eventlog/sqlite: stats: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows.Scan); err != nil {
				return fmt.Errorf("eventlog/sqlite: stats: %w", err)
			}
		}
		return rows.Err()
	}
	err = q(qs.models,
		func(scan func(...any) error) error {
			var m eventlog.ModelUsage
			var p, c, k float64
			if err := scan(&m.Day, &m.Agent, &m.Model, &m.Calls, &p, &c, &k, &m.CostUSD); err != nil {
				return err
			}
			m.PromptTokens, m.CompletionTokens, m.CachedTokens = int64(p), int64(c), int64(k)
			s.Models = append(s.Models, m)
			return nil
		})
	if err != nil {
		return nil, err
	}
	lat := map[string][]int64{}
	tools := map[string]*eventlog.ToolUsage{}
	err = q(qs.tools,
		func(scan func(...any) error) error {
			var name string
			var us int64
			var failed bool
			if err := scan(&name, &us, &failed); err != nil {
				return err
			}
			t := tools[name]
			if t == nil {
				t = &eventlog.ToolUsage{Tool: name}
				tools[name] = t
			}
			t.Calls++
			if failed {
				t.Errors++
			}
			lat[name] = append(lat[name], us)
			return nil
		})
	if err != nil {
		return nil, err
	}
	for name, t := range tools {
		v := lat[name]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		t.P50US, t.P95US = eventlog.Quantile(v, 0.5), eventlog.Quantile(v, 0.95)
		t.ErrorRate = float64(t.Errors) / float64(t.Calls)
		s.Tools = append(s.Tools, *t)
	}
	agents := map[string]*eventlog.SessionUsage{}
	durations := map[string][]int64{}
	steps := map[string]int64{}
	err = q(qs.sessions,
		func(scan func(...any) error) error {
			var agent, status string
			var st, dur int64
			if err := scan(&agent, &status, &st, &dur); err != nil {
				return err
			}
			a := agents[agent]
			if a == nil {
				a = &eventlog.SessionUsage{Agent: agent}
				agents[agent] = a
			}
			a.Sessions++
			switch messages.Type(status) {
			case messages.TypeTaskCompleted:
				a.Completed++
			case messages.TypeTaskFailed:
				a.Failed++
			default:
				a.Running++
			}
			steps[agent] += st
			durations[agent] = append(durations[agent], dur)
			return nil
		})
	if err != nil {
		return nil, err
	}
	for name, a := range agents {
		v := durations[name]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		a.P50DurationUS, a.P95DurationUS = eventlog.Quantile(v, 0.5), eventlog.Quantile(v, 0.95)
		a.AvgSteps = float64(steps[name]) / float64(a.Sessions)
		s.Sessions = append(s.Sessions, *a)
	}
	err = q(qs.memory,
		func(scan func(...any) error) error {
			var m eventlog.MemoryOps
			if err := scan(&m.Tier, &m.Op, &m.Count); err != nil {
				return err
			}
			s.Memory = append(s.Memory, m)
			return nil
		})
	if err != nil {
		return nil, err
	}
	if f.Buckets > 0 {
		s.Series = f.Series()
		err = q(reportSeries(f.SinceUS, f.UntilUS, f.BucketUS(), qs.recent),
			func(scan func(...any) error) error {
				var i, calls, maxUS, errs int64
				var tokens, cost, latency float64
				if err := scan(&i, &tokens, &cost, &calls, &latency, &maxUS, &errs); err != nil {
					return err
				}
				if i < 0 || i >= int64(len(s.Series)) {
					return nil
				}
				b := &s.Series[i]
				b.Tokens, b.CostUSD, b.ToolCalls, b.ToolLatencyUS, b.ToolLatencyMaxUS, b.Errors = int64(tokens), cost, calls, int64(latency), maxUS, errs
				return nil
			})
		if err != nil {
			return nil, err
		}
	}
	s.Sort()
	return s, nil
}
