package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// streamEvent is event seq of stream id, with ID "<id>/<seq>".
func streamEvent(t *testing.T, id string, seq uint64, p messages.Payload) messages.Envelope {
	t.Helper()
	e := sessionEvent(t, seq, id+"/1", p)
	e.ID, e.SessionID = fmt.Sprintf("%s/%d", id, seq), id
	return e
}

// TestAnalyticsCountSessionsOnly: the streams of the log that are no session (an
// agent's notes, a memory namespace, a knowledge base, an A2A task's push
// configs, a dashboard sign-in, an MCP client's session, a stored bus command, an
// agent's configuration) are counted neither by Report nor by session_outcomes as sessions.
func TestAnalyticsCountSessionsOnly(t *testing.T) {
	addr, db := fencingDatabase(t, "sessionsonly")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]
	if err := l.Append(ctx, []messages.Envelope{
		sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x", Agent: "noter"}),
		sessionEvent(t, 2, "s/1", &messages.ModelRequested{Key: "s/2", Model: "offline", Step: 1}),
		sessionEvent(t, 3, "s/1", &messages.TaskCompleted{Output: "z"}),
	}); err != nil {
		t.Fatal(err)
	}
	streams := map[string]messages.Payload{
		eventlog.NotesStreamPrefix + "default":  &messages.NoteAdded{NoteID: "n", Type: "fact", Body: "b"},
		eventlog.MemoryStreamPrefix + "ns":      &messages.MemoryAdded{Reason: "r", Memory: messages.MemoryRecord{MemoryID: "m", Tier: "episodic", Content: "c"}},
		eventlog.KnowledgeStreamPrefix + "docs": &messages.KBDocumentIngested{Source: "a.txt", Hash: "h"},
		eventlog.A2APushStreamPrefix + "task":   &messages.NoteAdded{NoteID: "p", Type: "push", Body: "b"},
		eventlog.UISignInStreamPrefix + "ab12":  &messages.UISignedIn{TokenMAC: "m", CSRFHash: "h", ExpiresUS: 1},
		eventlog.MCPSessionStreamPrefix + "c1":  &messages.MCPCallStarted{RequestID: "1", ArgsHash: "h"},
		messages.BusStream("effect", "e1"):      &messages.BusStored{Message: []byte(`{}`)},
		messages.ConfigStream("ab12"):           &messages.ConfigRecorded{Digest: "ab12", Config: messages.AgentConfig{SystemPrompt: "p"}},
	}
	if len(streams) != len(eventlog.NonSessionPrefixes) {
		t.Fatalf("the test writes %d kinds of streams, eventlog.NonSessionPrefixes has %d: add the new one", len(streams), len(eventlog.NonSessionPrefixes))
	}
	for id, p := range streams {
		if err := l.Append(ctx, []messages.Envelope{streamEvent(t, id, 1, p)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Agent != "noter" || st.Sessions[0].Sessions != 1 || st.Sessions[0].Completed != 1 {
		t.Errorf("Report's sessions = %+v; want the one session of noter, completed", st.Sessions)
	}
	rows, err := l.conn.Query(ctx, "SELECT agent, toInt64(sessions), toInt64(completed), toInt64(running) FROM session_outcomes ORDER BY agent")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var agent string
		var n, completed, running int64
		if err := rows.Scan(&agent, &n, &completed, &running); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%q: %d sessions, %d completed, %d running", agent, n, completed, running))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := `"noter": 1 sessions, 1 completed, 0 running`; strings.Join(got, "; ") != want {
		t.Errorf("session_outcomes = %s; want %s", strings.Join(got, "; "), want)
	}
	var agents string
	if err := l.conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(concat(session_id, '=', agent)), ',') FROM session_agents").Scan(&agents); err != nil || agents != "s=noter" {
		t.Errorf("session_agents = %q (%v); want s=noter", agents, err)
	}
}

// TestViewsUseIsSession: the views that count sessions leave out the streams that
// eventlog.IsSession does, with its condition (eventlog.NotPrefixed) as Report
// has it: a prefix added there must be added to them, in a new migration.
func TestViewsUseIsSession(t *testing.T) {
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	cond := eventlog.NotPrefixed("substring", "session_id")
	for _, view := range []string{"session_outcomes", "session_agents"} {
		var def string
		for _, m := range ms {
			for _, s := range m.Statements {
				if strings.HasPrefix(s, "CREATE VIEW IF NOT EXISTS "+view+" ") {
					def = s
				}
			}
		}
		if !strings.Contains(def, cond) {
			t.Errorf("the latest definition of %s lacks the condition of eventlog.IsSession, %s:\n%s", view, cond, def)
		}
	}
	if _, err := fs.Stat(schemaFS, "schema"); err != nil {
		t.Fatal(err)
	}
}

// TestModelCallsChargedToTheirTask: a session whose second task names another
// agent charges that task's model calls to that agent, in Report and in
// model_usage; the session stays its first task's agent's.
func TestModelCallsChargedToTheirTask(t *testing.T) {
	addr, db := fencingDatabase(t, "pertask")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := openNodes(t, ctx, addr, db, 1)[0]
	answer := func(seq uint64, task string, tokens int) messages.Envelope {
		return sessionEvent(t, seq, task, &messages.ModelResponded{Key: fmt.Sprintf("s/%d", seq-1), Model: "offline",
			Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}, Usage: messages.Usage{PromptTokens: tokens}})
	}
	if err := l.Append(ctx, []messages.Envelope{
		sessionEvent(t, 1, "s/1", &messages.TaskSubmitted{Input: "x", Agent: "planner"}),
		answer(2, "s/1", 10),
		sessionEvent(t, 3, "s/1", &messages.TaskCompleted{Output: "z"}),
		sessionEvent(t, 4, "s/4", &messages.TaskSubmitted{Input: "y", Agent: "coder"}),
		answer(5, "s/4", 200),
		answer(6, "s/4", 3000),
		sessionEvent(t, 7, "s/4", &messages.TaskCompleted{Output: "w"}),
		sessionEvent(t, 8, "s/8", &messages.TaskSubmitted{Input: "v"}),
		answer(9, "s/8", 40000),
	}); err != nil {
		t.Fatal(err)
	}
	st, err := l.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range st.Models {
		got = append(got, fmt.Sprintf("%s %d calls %d prompt", m.Agent, m.Calls, m.PromptTokens))
	}
	want := "coder 2 calls 3200 prompt; default 1 calls 40000 prompt; planner 1 calls 10 prompt"
	if strings.Join(got, "; ") != want {
		t.Errorf("Report's models: %s; want %s", strings.Join(got, "; "), want)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Agent != "planner" || st.Sessions[0].Sessions != 1 {
		t.Errorf("Report's sessions = %+v; want the one session, of planner (its first task's agent)", st.Sessions)
	}
	if st, err := l.Report(ctx, eventlog.StatsFilter{Agent: "coder"}); err != nil || len(st.Models) != 1 || st.Models[0].PromptTokens != 3200 || len(st.Sessions) != 0 {
		t.Errorf("Report of agent coder = %+v (%v); want its 2 calls and no session", st, err)
	}
	var view string
	if err := l.conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(line), '; ') FROM (SELECT concat(agent, ' ', toString(calls), ' calls ', toString(prompt_tokens), ' prompt') AS line FROM model_usage ORDER BY agent)").
		Scan(&view); err != nil || view != want {
		t.Errorf("model_usage: %s (%v); want %s", view, err, want)
	}
	var agent string
	if err := l.conn.QueryRow(ctx, "SELECT agent FROM session_outcomes").Scan(&agent); err != nil || agent != "planner" {
		t.Errorf("session_outcomes has agent %q (%v); want planner", agent, err)
	}
}

// TestFencedEventsListsRowsAfterTheTakeoverOnly: node a's batch (seq 3) lands
// while a still owns the partition; node b takes the partition before a
// confirms it, reads the session with seq 3 and goes on from it. Node a's next
// batch (seq 4 and 5), which passed its lease check before b's takeover, lands
// after it. fenced_events lists a's rows that landed after the takeover and not
// seq 3, which b folded: Read, Report and the views count seq 3 and none of the
// rows of a's second batch, neither at seq 4 (where b wrote too) nor at 5.
func TestFencedEventsListsRowsAfterTheTakeoverOnly(t *testing.T) {
	addr, db := fencingDatabase(t, "fencedafter")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := openNodes(t, ctx, addr, db, 3)
	a, a2, b := nodes[0], nodes[1], nodes[2] // a2: node a's writer of the next batch
	ea := startSession(t, ctx, a)
	lease := eventlog.Lease{Partition: 1, Epoch: ea}
	folded := sessionEvent(t, 3, "s/1", &messages.ModelResponded{Key: "s/2", Model: "offline",
		Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}, Usage: messages.Usage{PromptTokens: 10}})
	var (
		once, ownOnce sync.Once
		eb            uint64
		read          []messages.Envelope
		hookErr       error
		secondErr     error
	)
	a2.beforeInsert = func() {
		ownOnce.Do(func() {
			if eb, hookErr = b.Own(ctx, "b", []int{1}); hookErr == nil {
				read, hookErr = b.Read(ctx, "s", 1)
			}
		})
	}
	a.beforeConfirm = func() {
		once.Do(func() {
			secondErr = a2.AppendLeased(ctx, lease, []messages.Envelope{
				sessionEvent(t, 4, "s/1", &messages.ToolCallCompleted{Key: "s/4", CallID: "c", Tool: "stale", Result: "r", LatencyUS: 7}),
				sessionEvent(t, 5, "s/1", &messages.ModelResponded{Key: "s/4", Model: "offline",
					Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "stale"}, Usage: messages.Usage{PromptTokens: 1000}}),
			})
		})
	}
	err := a.AppendLeased(ctx, lease, []messages.Envelope{folded})
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if !errors.Is(secondErr, eventlog.ErrFenced) {
		t.Fatalf("node a's batch written after b took the partition: %v, want ErrFenced", secondErr)
	}
	if !errors.Is(err, eventlog.ErrFenced) {
		t.Fatalf("node a's batch confirmed after b took the partition: %v, want ErrFenced", err)
	}
	if len(read) != 3 || read[2].ID != folded.ID {
		t.Fatalf("node b read %d events at its takeover; want 3, node a's seq 3 last", len(read))
	}
	if err := b.AppendLeased(ctx, eventlog.Lease{Partition: 1, Epoch: eb}, []messages.Envelope{
		sessionEvent(t, 4, "s/1", &messages.TaskCompleted{Output: "z"}),
	}); err != nil {
		t.Fatal(err)
	}

	var listed string
	if err := b.conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(concat(toString(seq), '@', toString(epoch))), ',') FROM (SELECT DISTINCT seq, epoch FROM fenced_events ORDER BY seq)").
		Scan(&listed); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("4@%d,5@%d", ea, ea); listed != want {
		t.Errorf("fenced_events lists %s; want %s (node a's rows after the takeover, not seq 3, which node b folded)", listed, want)
	}
	events, err := b.Read(ctx, "s", 1)
	if err != nil || len(events) != 4 || events[2].ID != folded.ID || events[3].Type != messages.TypeTaskCompleted {
		t.Fatalf("Read = %d events (%v); want 4: node a's 3, node b's task.completed", len(events), err)
	}
	st, err := b.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Models) != 1 || st.Models[0].Calls != 1 || st.Models[0].PromptTokens != 10 || len(st.Tools) != 0 ||
		len(st.Sessions) != 1 || st.Sessions[0].Agent != "planner" || st.Sessions[0].Completed != 1 {
		t.Errorf("Report = %+v; want node a's seq 3 (10 prompt tokens, agent planner), no tool call, the session completed", st)
	}
	var view string
	if err := b.conn.QueryRow(ctx, "SELECT concat((SELECT concat(agent, ' ', toString(calls), ' calls ', toString(prompt_tokens), ' prompt') FROM model_usage), ' tools ', toString((SELECT count() FROM tool_usage)), ' sessions ', (SELECT concat(agent, ' ', toString(sessions), ' completed ', toString(completed)) FROM session_outcomes))").
		Scan(&view); err != nil || view != "planner 1 calls 10 prompt tools 0 sessions planner 1 completed 1" {
		t.Errorf("views: %q (%v); want planner 1 calls 10 prompt tools 0 sessions planner 1 completed 1", view, err)
	}
}
