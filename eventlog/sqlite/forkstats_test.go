package sqlite

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// Report's queries find a fork's session.forked event in the pass that reads
// the events (eventsWithAgent), where each joined a subquery that scanned the
// events once more: each query reads the events table once. Their answers are
// those of the queries that joined it, on a log of forks, a fork of a fork, other
// agents, a session still running, a memory namespace and a notes stream, over
// every range and agent.
func TestReportReadsTheEventsOnceWithItsForks(t *testing.T) {
	ctx := context.Background()
	l := openTemp(ctx, t)
	seqs := map[string]uint64{}
	var all []messages.Envelope
	add := func(session string, ts int64, p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seqs[session]++
		e.ID, e.SessionID, e.Seq, e.TS, e.Actor = fmt.Sprintf("%s/%d", session, seqs[session]), session, seqs[session], ts, "session"
		all = append(all, e)
	}
	// copyOf copies session's first n events into fork, as a fork does.
	copyOf := func(fork, session string, n int) {
		var copied int
		for _, e := range all {
			if e.SessionID == session && copied < n {
				copied++
				seqs[fork]++
				e.SessionID, e.ID = fork, fmt.Sprintf("%s/%d", fork, e.Seq)
				all = append(all, e)
			}
		}
	}
	usage := func(p int) messages.Usage {
		return messages.Usage{PromptTokens: p, CompletionTokens: 2, CostUSD: float64(p) / 1000}
	}
	calls := func(session string, ts int64, model string, prompt int) {
		key := fmt.Sprintf("%s/m%d", session, seqs[session])
		add(session, ts, &messages.ModelRequested{Key: key, Model: model, Step: 1})
		add(session, ts+1, &messages.ModelResponded{Key: key, Model: model, Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}, Usage: usage(prompt), LatencyUS: 10})
		add(session, ts+2, &messages.ToolCallCompleted{Key: key + "/t", CallID: "c", Tool: model + "-tool", Result: "r", LatencyUS: int64(prompt)})
		add(session, ts+3, &messages.MemoryRemembered{Key: key + "/r", Reason: "a fact"})
	}
	const day = 86_400_000_000
	add("parent", 1*day, &messages.TaskSubmitted{Input: "x", Agent: "planner"})
	calls("parent", 1*day+10, "a", 100)
	calls("parent", 1*day+20, "b", 200)
	add("parent", 1*day+30, &messages.TaskCompleted{Output: "y"})
	copyOf("fork", "parent", 5)
	add("fork", 2*day, &messages.SessionForked{ParentID: "parent", AtSeq: 5})
	calls("fork", 2*day+10, "b", 300)
	add("fork", 2*day+20, &messages.TaskCompleted{Output: "w"})
	copyOf("fork2", "fork", 8)
	add("fork2", 3*day, &messages.SessionForked{ParentID: "fork", AtSeq: 8})
	calls("fork2", 3*day+10, "a", 400)
	add("fork2", 3*day+20, &messages.TaskFailed{Reason: messages.ReasonCancelled})
	add("other", 2*day+5, &messages.TaskSubmitted{Input: "x"})
	calls("other", 2*day+10, "a", 500)
	add("other", 2*day+20, &messages.TaskCompleted{Output: "y"})
	add("other", 3*day+5, &messages.TaskSubmitted{Input: "again", Agent: "coder"})
	calls("other", 3*day+10, "c", 600)
	add("running", 3*day+5, &messages.TaskSubmitted{Input: "x", Agent: "coder"})
	calls("running", 3*day+10, "c", 700)
	add("memory/user:u", 2*day, &messages.MemoryRemembered{Key: "k", Reason: "a fact"})
	add(eventlog.NotesStreamPrefix+"planner", 2*day, &messages.UISignedOut{})
	if err := l.Append(ctx, all); err != nil {
		t.Fatal(err)
	}

	rows := func(query string, args ...any) []string {
		t.Helper()
		r, err := l.rdb.QueryContext(ctx, query, args...)
		if err != nil {
			t.Fatalf("%v: %s", err, query)
		}
		defer r.Close()
		cols, err := r.Columns()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for r.Next() {
			v := make([]any, len(cols))
			ptr := make([]any, len(cols))
			for i := range v {
				ptr[i] = &v[i]
			}
			if err := r.Scan(ptr...); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(v...))
		}
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	joined := forksJoinedReport()
	for i, q := range []string{reportModels, reportTools, reportSessions, reportMemory} {
		var scans []string
		for _, step := range rows("EXPLAIN QUERY PLAN "+q, 0, "", "") {
			if strings.Contains(step, " events") {
				scans = append(scans, step)
			}
		}
		if len(scans) != 1 {
			t.Errorf("query %d reads the events table %d times, want once: %q", i, len(scans), scans)
		}
		var answered int
		for _, since := range []int64{math.MinInt64, 2 * day, 3 * day, 4 * day} {
			for _, agent := range []string{"", "planner", "default", "coder", "nobody"} {
				got, want := rows(q, since, agent, agent), rows(joined[i], since, agent, agent)
				answered += len(got)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("query %d since %d agent %q answers\n%s\nwant, as with the forks joined,\n%s", i, since, agent, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		}
		if answered == 0 {
			t.Errorf("query %d answered nothing", i)
		}
	}
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var prompt int64
	for _, m := range st.Models {
		prompt += m.PromptTokens
	}
	if prompt != 100+200+300+400+500+600+700 {
		t.Errorf("Report's models = %+v: %d prompt tokens, want each call once, not its copies in the forks", st.Models, prompt)
	}
}

// forksJoinedReport is Report's queries as they were, each joining the forks'
// session.forked events (a scan of the events of its own) to eventsWithAgent.
func forksJoinedReport() [4]string {
	eventsWithAgent := func(cond string, payload bool) string {
		cols := "session_id, seq, type, ts"
		if payload {
			cols += ", payload"
		}
		return `(SELECT ` + cols + `, CASE WHEN task IS NULL THEN '' ELSE COALESCE(NULLIF(substr(task, 21), ''), 'default') END AS agent
	FROM (SELECT ` + cols + `, COALESCE(
		max(` + taskSeqAgent + `) OVER (PARTITION BY session_id ORDER BY seq ROWS UNBOUNDED PRECEDING),
		min(` + taskSeqAgent + `) OVER (PARTITION BY session_id)) AS task
	FROM events WHERE type = 'task.submitted' OR ` + cond + `)) e`
	}
	const forks = ` LEFT JOIN (SELECT session_id, max(seq) AS at FROM events WHERE type = 'session.forked' GROUP BY session_id) f ON f.session_id = e.session_id`
	const ownEvent = `e.seq > COALESCE(f.at, 0)`
	eventWhere := ownEvent + ` AND e.ts >= ? AND (? = '' OR e.agent = ?)`
	return [4]string{
		`SELECT date(e.ts / 1000000, 'unixepoch'), e.agent, COALESCE(` + payloadField("e", "$.model") + `, ''),
			count(*), total(` + payloadField("e", "$.usage.prompt_tokens") + `),
			total(` + payloadField("e", "$.usage.completion_tokens") + `),
			total(` + payloadField("e", "$.usage.cached_tokens") + `),
			total(` + payloadField("e", "$.usage.cost_usd") + `)
		FROM ` + eventsWithAgent("type = 'model.responded'", true) + forks + ` WHERE e.type = 'model.responded' AND ` + eventWhere + ` GROUP BY 1, 2, 3`,
		`SELECT COALESCE(` + payloadField("e", "$.tool") + `, ''), COALESCE(` + payloadField("e", "$.latency_us") + `, 0),
			COALESCE(` + payloadField("e", "$.error") + `, '') != ''
		FROM ` + eventsWithAgent("type = 'tool.completed'", true) + forks + ` WHERE e.type = 'tool.completed' AND ` + eventWhere,
		`SELECT agent, status, steps, duration FROM
		(SELECT substr(min(printf('%020d', e.seq) || e.agent), 21) AS agent,
		        CASE WHEN sum(e.type = 'task.submitted') <= sum(e.type IN ('task.completed', 'task.failed'))
		             THEN COALESCE(substr(max(CASE WHEN e.type LIKE 'task.%' THEN printf('%020d', e.seq) || e.type END), 21), '') ELSE '' END AS status,
		        sum(e.type = 'model.requested' AND ` + ownEvent + `) AS steps,
		        max(e.ts) - COALESCE(min(CASE WHEN e.seq >= COALESCE(f.at, 0) THEN e.ts END), min(e.ts)) AS duration
		 FROM ` + eventsWithAgent("1", false) + forks + `
		 WHERE e.ts >= ? AND ` + eventNotNotes + ` GROUP BY e.session_id)
		WHERE ? = '' OR agent = ?`,
		`SELECT COALESCE(` + payloadField("e", "$.memory.tier") + `, ` + payloadField("e", "$.tier") + `, ''), substr(e.type, 8), count(*)
		FROM ` + eventsWithAgent("type LIKE 'memory.%'", true) + forks + ` WHERE e.type LIKE 'memory.%' AND ` + eventWhere + ` GROUP BY 1, 2`,
	}
}
