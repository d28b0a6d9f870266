package sqlite_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/messages"
)

// A session whose second task names another agent charges that task's model and
// tool calls to that agent, as the ClickHouse log does (its
// TestModelCallsChargedToTheirTask, and the README: replay stats prints the same
// figures from either log); the session stays its first task's agent's.
func TestStatsChargeCallsToTheirTasksAgent(t *testing.T) {
	ctx := testCtx(t)
	lg := open(t, sqlite.Config{Dir: t.TempDir()})
	var events []messages.Envelope
	add := func(p messages.Payload) {
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(len(events) + 1)
		e.SessionID, e.Seq, e.Actor = "s", seq, "session"
		e.ID, e.TS = fmt.Sprintf("s/%d", seq), int64(1_000_000+seq)
		events = append(events, e)
	}
	answer := func(tokens int) {
		add(&messages.ModelResponded{Key: fmt.Sprintf("s/%d", len(events)), Model: "offline",
			Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "z"}, Usage: messages.Usage{PromptTokens: tokens}})
	}
	tool := func(name string) {
		add(&messages.ToolCallCompleted{Key: fmt.Sprintf("s/%d", len(events)), CallID: "c", Tool: name, Result: "r", LatencyUS: 5})
	}
	add(&messages.TaskSubmitted{Input: "x", Agent: "planner"})
	answer(10)
	tool("clock")
	add(&messages.TaskCompleted{Output: "z"})
	add(&messages.TaskSubmitted{Input: "y", Agent: "coder"})
	answer(200)
	tool("calculator")
	answer(3000)
	add(&messages.TaskCompleted{Output: "w"})
	add(&messages.TaskSubmitted{Input: "v"})
	answer(40000)
	if err := lg.Append(ctx, events); err != nil {
		t.Fatal(err)
	}
	st, err := lg.Report(ctx, eventlog.StatsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range st.Models {
		got = append(got, fmt.Sprintf("%s %d calls %d prompt", m.Agent, m.Calls, m.PromptTokens))
	}
	if want := "coder 2 calls 3200 prompt; default 1 calls 40000 prompt; planner 1 calls 10 prompt"; strings.Join(got, "; ") != want {
		t.Errorf("Report's models: %s; want %s", strings.Join(got, "; "), want)
	}
	if len(st.Sessions) != 1 || st.Sessions[0].Agent != "planner" || st.Sessions[0].Sessions != 1 {
		t.Errorf("Report's sessions = %+v; want the one session, of planner (its first task's agent)", st.Sessions)
	}
	coder, err := lg.Report(ctx, eventlog.StatsFilter{Agent: "coder"})
	if err != nil || len(coder.Models) != 1 || coder.Models[0].PromptTokens != 3200 || len(coder.Sessions) != 0 ||
		len(coder.Tools) != 1 || coder.Tools[0].Tool != "calculator" {
		t.Errorf("Report of agent coder = %+v (%v); want its 2 model calls, its calculator call and no session", coder, err)
	}
	planner, err := lg.Report(ctx, eventlog.StatsFilter{Agent: "planner"})
	if err != nil || len(planner.Models) != 1 || planner.Models[0].PromptTokens != 10 || len(planner.Sessions) != 1 ||
		len(planner.Tools) != 1 || planner.Tools[0].Tool != "clock" {
		t.Errorf("Report of agent planner = %+v (%v); want its model call, its clock call and its session", planner, err)
	}
}
