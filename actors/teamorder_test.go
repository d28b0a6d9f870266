package actors_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// rulesBeforeTeamAnswerOrder is the last version of the decision rules whose team
// recorded the answers of its parallel members (a fan-out's branches, a debate's
// proposals) in the order they completed.
const rulesBeforeTeamAnswerOrder = 14

// recordTeamInOrder records a task of the team agent under rules, as recordTeam
// does, but holds the delegate calls the team requests at once and answers them
// only when the team waits for them, in the order of reversed (the last requested
// first) or of their request. It returns the events and the tasks each member was
// handed, in order.
func recordTeamInOrder(t *testing.T, agent actors.Agent, rules int, d *delegates, input string, reversed bool) []messages.Envelope {
	t.Helper()
	as := actors.Agents{Named: map[string]actors.Agent{agent.Name: agent}}
	st := actors.NewSessionState("r").WithAgents(as)
	var events []messages.Envelope
	add := func(p messages.Payload, cause string) {
		t.Helper()
		e := env(t, p, "r", st.LastSeq+1, "task-r")
		e.CausationID = cause
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	type held struct {
		req   *messages.ToolCallRequested
		cause string
	}
	var pending []held
	add(&messages.TaskSubmitted{Input: input, Agent: agent.Name, Rules: rules}, "")
	for range 60 {
		dec := st.DecideAmong(as, st.LastSeq+1, 0)
		if dec == nil {
			if len(pending) == 0 {
				t.Fatalf("the task waits for nothing: %s", types(events))
			}
			if reversed {
				slices.Reverse(pending)
			}
			for _, h := range pending {
				var args struct{ Agent, Task string }
				if err := json.Unmarshal([]byte(h.req.Arguments), &args); err != nil {
					t.Fatal(err)
				}
				d.handed[args.Agent] = append(d.handed[args.Agent], args.Task)
				out, err := d.members[args.Agent](args.Task, len(d.handed[args.Agent]))
				c := &messages.ToolCallCompleted{Key: h.req.Key, CallID: h.req.CallID, Tool: h.req.Tool, Result: out}
				if err != nil {
					c.Result, c.Error = "", err.Error()
				}
				add(c, h.cause)
			}
			pending = nil
			continue
		}
		add(dec.Payload, dec.CausationID)
		switch p := dec.Payload.(type) {
		case *messages.ToolCallRequested:
			pending = append(pending, held{p, events[len(events)-1].ID})
		case *messages.TaskCompleted, *messages.TaskFailed:
			return events
		}
	}
	t.Fatalf("the task did not end: %s", types(events))
	return nil
}

// A fan-out whose branches share a fact under the same key hands its aggregator
// the same task whichever branch finished first: the team records its parallel
// members' answers, and the facts they share, in the team's order once all of
// them are in, so two live runs of the same task give the aggregator's model the
// same prompt. Under rules 14 the facts were in the order the branches finished
// in, and a task recorded so still decides so.
func TestTeamFanOutHandsTheSameStateWhicheverBranchFinishesFirst(t *testing.T) {
	agent := newTeamAgent(t, "panel", "scripted", actors.Team{Pattern: actors.TeamFanOut, Members: members("a", "b"), Aggregator: "agg"})
	run := func(rules int, reversed bool) (string, []messages.Envelope) {
		d := newDelegates(map[string]memberFunc{
			"a":   answer("A's idea\nSTATE: risk = low"),
			"b":   answer("B's idea\nSTATE: risk = high"),
			"agg": answer("A+B"),
		})
		events := recordTeamInOrder(t, agent, rules, d, "ideas", reversed)
		wantCompleted(t, events, "A+B")
		verifyTeam(t, agent, events)
		return strings.Join(d.tasks("agg"), "\n---\n"), events
	}
	inOrder, _ := run(actors.ContextRules, false)
	reversed, events := run(actors.ContextRules, true)
	if inOrder != reversed {
		t.Errorf("the aggregator's task depends on which branch finished first:\n%s\n--- against ---\n%s", inOrder, reversed)
	}
	if !strings.Contains(reversed, "<risk by=\"a\">low</risk>\n<risk by=\"b\">high</risk>") {
		t.Errorf("the shared facts are not in the team's order:\n%s", reversed)
	}
	wantDiverges(t, agent, events, rulesBeforeTeamAnswerOrder)

	old, _ := run(rulesBeforeTeamAnswerOrder, false)
	oldReversed, _ := run(rulesBeforeTeamAnswerOrder, true)
	if old == oldReversed {
		t.Errorf("under rules %d the aggregator's task was the finishing order's; it is the same now", rulesBeforeTeamAnswerOrder)
	}
}

// A debate's judge is handed the same task whichever proposer finished first.
func TestTeamDebateHandsTheJudgeTheSameStateWhicheverProposerFinishesFirst(t *testing.T) {
	agent := newTeamAgent(t, "court", "scripted", actors.Team{Pattern: actors.TeamDebate, Members: members("pro", "con"), Judge: "judge", Rounds: 1})
	run := func(reversed bool) string {
		d := newDelegates(map[string]memberFunc{
			"pro":   answer("yes\nSTATE: cost = 3"),
			"con":   answer("no\nSTATE: cost = 5"),
			"judge": answer(`{"verdict": "accept", "winner": "con", "reason": "cheaper"}`),
		})
		events := recordTeamInOrder(t, agent, actors.ContextRules, d, "decide", reversed)
		wantCompleted(t, events, "no\nSTATE: cost = 5")
		verifyTeam(t, agent, events)
		return strings.Join(d.tasks("judge"), "\n---\n")
	}
	if inOrder, reversed := run(false), run(true); inOrder != reversed {
		t.Errorf("the judge's task depends on which proposer finished first:\n%s\n--- against ---\n%s", inOrder, reversed)
	}
}

// A reply's tool calls that finish in the reverse of their order are recorded as
// they finish, and their results reach the model in the order of the calls: the
// next prompt is the same whichever call finished first.
func TestParallelToolResultsReachTheModelInCallOrder(t *testing.T) {
	// c finishes first, then b, then a: each call waits until the results of
	// the calls after it are recorded.
	var h *harness
	wait := map[string]int{"a": 2, "b": 1, "c": 0}
	slow := funcTool{"slow", func(ctx context.Context, c tools.Call) (string, error) {
		for deadline := time.Now().Add(10 * time.Second); ; {
			events, err := h.log.Read(ctx, "s1", 1)
			if err != nil {
				return "", err
			}
			if strings.Count(types(events), string(messages.TypeToolCallCompleted)) >= wait[c.Arguments] {
				return "ok " + c.Arguments, nil
			}
			if time.Now().After(deadline) {
				return "", errors.New("the other calls were not recorded in 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}}
	model := &lastRequest{Model: script(t,
		calls(messages.ToolCall{ID: "1", Name: "slow", Arguments: "a"}, messages.ToolCall{ID: "2", Name: "slow", Arguments: "b"}, messages.ToolCall{ID: "3", Name: "slow", Arguments: "c"}),
		llm.ScriptStep{Content: "all done"})}
	h = newHarness(t, harnessOpts{model: model, tools: []tools.Tool{slow}})
	h.submit("s1", "task-1", "go")
	events := h.wait("s1")
	var done []string
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted {
			done = append(done, decode[*messages.ToolCallCompleted](t, e).CallID)
		}
	}
	if got := strings.Join(done, " "); got != "3 2 1" {
		t.Fatalf("the calls finished in the order %s; the test wants 3 2 1", got)
	}
	model.mu.Lock()
	msgs := model.msgs
	model.mu.Unlock()
	var got []string
	for _, m := range msgs {
		if m.Role == messages.RoleTool {
			got = append(got, m.ToolCallID+"="+m.Content)
		}
	}
	if s := strings.Join(got, " "); s != "1=ok a 2=ok b 3=ok c" {
		t.Errorf("the tool results reach the model as %s; want them in call order", s)
	}
}
