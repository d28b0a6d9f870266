package actors_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// rulesInput is a task whose input does not fit a 400-token window: its question
// is at its end, which a cut under version 1 of the rules loses and one under
// version 2 keeps.
var rulesInput = "Background for the question at the end. " +
	strings.Repeat("The ledger lists every shipment by date, carrier and weight. ", 40) + "Question: what is 12 * (7 + 5)?"

// The prompt hashes of the first model call of rulesInput under rulesAgent,
// pinned from the builds that made them: version 1 from 8c2c1ee (the last build
// before the cut kept the tail), version 2 from fcad254 (the last before tasks
// recorded their rules): with a model for summaries the call condenses the input,
// without one it is the loop's call with the input cut in the middle.
const (
	pinRules1          = "674d784f3336e7f0ff4938f60c5a84707831d115b0f4db785fcdc966e58c5ae3"
	pinRules2Condense  = "ce89bde60e8fff36972971a6ae6a9339408f9298ab136f197a7ddb5000b657e2"
	pinRules2NoSummary = "91f20be310a4a6013e44b1e573974368648310eb1c372559d8c1c8a10bd3f018"
)

func rulesAgent(summaries string) actors.Agent {
	return actors.Agent{Model: "m", SystemPrompt: "test",
		Context: actors.ContextOptions{Window: 400, ReservedOutput: 100, Compression: actors.Compression{Model: summaries}}}
}

// firstRequest folds task and returns the agent's first decision, a model call,
// and the request it sends.
func firstRequest(t *testing.T, a actors.Agent, task *messages.TaskSubmitted) (*messages.ModelRequested, llm.Request) {
	t.Helper()
	st := actors.NewSessionState("r").WithAgents(actors.Agents{Default: a})
	if err := st.Apply(env(t, task, "r", 1, "task-r")); err != nil {
		t.Fatal(err)
	}
	d := st.Decide(a, 2, 0)
	mr, ok := d.Payload.(*messages.ModelRequested)
	if !ok {
		t.Fatalf("first decision %T, want a model call", d.Payload)
	}
	if err := st.Apply(env(t, mr, "r", 2, "task-r")); err != nil {
		t.Fatal(err)
	}
	req := st.Request(a)
	if llm.PromptHash(req) != mr.PromptHash {
		t.Fatalf("the request sent is not the one recorded")
	}
	return mr, req
}

// A task of today's rules, and one recorded under version 2, build byte for byte
// the prompts the builds before tasks recorded their rules built: version 3
// changed no prompt (a team's budget).
func TestCurrentRulesKeepThePinnedPromptHashes(t *testing.T) {
	for v := 2; v <= actors.ContextRules; v++ {
		mr, _ := firstRequest(t, rulesAgent(""), &messages.TaskSubmitted{Input: rulesInput, Rules: v})
		if mr.Purpose != pctx.PurposeCondenseSection || mr.PromptHash != pinRules2Condense {
			t.Fatalf("rules %d with a summary model: purpose %q hash %s, want %s %s", v, mr.Purpose, mr.PromptHash, pctx.PurposeCondenseSection, pinRules2Condense)
		}
		mr, req := firstRequest(t, rulesAgent(actors.NoSummaryModel), &messages.TaskSubmitted{Input: rulesInput, Rules: v})
		if mr.Purpose != "" || mr.PromptHash != pinRules2NoSummary || !strings.HasSuffix(req.Messages[1].Content, "Question: what is 12 * (7 + 5)?") {
			t.Fatalf("rules %d without one: purpose %q hash %s, want the loop's %s", v, mr.Purpose, mr.PromptHash, pinRules2NoSummary)
		}
	}
}

// A task recorded before tasks recorded their rules runs under version 1: the
// prompt the builds of then built (its head, then the marker), no condense call.
func TestATaskWithNoRulesRunsUnderVersion1(t *testing.T) {
	for _, summaries := range []string{"", actors.NoSummaryModel} {
		mr, req := firstRequest(t, rulesAgent(summaries), &messages.TaskSubmitted{Input: rulesInput})
		if mr.Purpose != "" || mr.PromptHash != pinRules1 {
			t.Fatalf("summaries %q: purpose %q hash %s, want the loop's %s", summaries, mr.Purpose, mr.PromptHash, pinRules1)
		}
		if c := req.Messages[1].Content; !strings.HasSuffix(c, " tokens truncated]") || strings.Contains(c, "Question:") {
			t.Fatalf("version 1 keeps the head only: %q", c[len(c)-80:])
		}
	}
}

// A task recorded under rules this build does not have is not decided under
// others: a live session fails it and says why; verify says so, not a divergence.
func TestATaskOfUnknownRulesFailsAndVerifyNamesTheVersion(t *testing.T) {
	st := actors.NewSessionState("r")
	task := env(t, &messages.TaskSubmitted{Input: "hi", Rules: actors.ContextRules + 1}, "r", 1, "task-r")
	if err := st.Apply(task); err != nil {
		t.Fatal(err)
	}
	f, ok := st.Decide(rulesAgent(""), 2, 0).Payload.(*messages.TaskFailed)
	if want := fmt.Sprintf("decision rules version %d, which is newer than this build", actors.ContextRules+1); !ok || f.Reason != messages.ReasonUnsupportedRules || !strings.Contains(f.Error, want) {
		t.Fatalf("decided %+v", f)
	}
	failed := env(t, f, "r", 2, "task-r")
	failed.CausationID = "task-r"
	_, err := actors.Verify(rulesAgent(""), []messages.Envelope{task, failed})
	var re *actors.RulesError
	if !errors.As(err, &re) || re.Version != actors.ContextRules+1 || re.Seq != 1 {
		t.Fatalf("verify: %v", err)
	}
}

// A session recorded with no rules version by a build that ran version 2 (from
// when the cut kept the tail until tasks recorded their rules) verifies too: its
// tasks are re-decided under version 2 where version 1 diverges.
func TestVerifyAnUnversionedSessionOfVersion2(t *testing.T) {
	for _, summaries := range []string{"", actors.NoSummaryModel} {
		a := rulesAgent(summaries)
		st := actors.NewSessionState("r").WithAgents(actors.Agents{Default: a})
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
		add(&messages.TaskSubmitted{Input: rulesInput, Rules: 2}, "")
		for range 4 {
			d := st.DecideAmong(actors.Agents{Default: a}, st.LastSeq+1, 0)
			if d == nil {
				break
			}
			add(d.Payload, d.CausationID)
			mr, ok := d.Payload.(*messages.ModelRequested)
			if !ok {
				break
			}
			answer := "144"
			if mr.Purpose != "" {
				answer = "A ledger of shipments, then the question: what is 12 * (7 + 5)?"
			}
			add(&messages.ModelResponded{Key: mr.Key, Model: "m", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: answer}}, events[len(events)-1].ID)
		}
		if events[len(events)-1].Type != messages.TypeTaskCompleted {
			t.Fatalf("recording: %s", types(events))
		}
		if div, err := actors.Verify(a, events); div != nil || err != nil {
			t.Fatalf("summaries %q: the versioned recording: %v %v", summaries, div, err)
		}
		// The same recording as the builds before the version wrote it.
		old, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: rulesInput})
		if err != nil {
			t.Fatal(err)
		}
		events[0].Payload = old.Payload
		if div, err := actors.Verify(a, events); div != nil || err != nil {
			t.Fatalf("summaries %q: the unversioned recording: %v %v", summaries, div, err)
		}
		// A prompt that neither version builds still diverges, at the loop's first
		// call (a condense call sends no system prompt).
		b := a
		b.SystemPrompt = "changed"
		want := uint64(2)
		if summaries == "" {
			want = 4
		}
		if div, err := actors.Verify(b, events); err != nil || div == nil || div.Seq != want {
			t.Fatalf("summaries %q: a changed prompt: %v %v", summaries, div, err)
		}
	}
}

// After a restart, a task recorded with no rules version resumes under version 1,
// the rules it ran under; a new task is recorded with this build's, whatever the
// client sent, and runs under them.
func TestAResumedTaskKeepsItsRulesAndANewTaskGetsTodays(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	old := env(t, &messages.TaskSubmitted{Input: rulesInput}, "s", 1, "t1")
	if err := lg.Append(ctx, []messages.Envelope{old}); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	model := script(t, llm.ScriptStep{Content: "done 1"}, llm.ScriptStep{Content: "a ledger; the question: 12 * (7 + 5)?"}, llm.ScriptStep{Content: "done 2"})
	h := newHarness(t, harnessOpts{dir: dir, model: model, deps: func(d *actors.SessionDeps) {
		d.Agent.Context = actors.ContextOptions{Window: 400, ReservedOutput: 100}
	}})
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	events := h.wait("s")
	if mr := decode[*messages.ModelRequested](t, events[1]); mr.Purpose != "" || mr.PromptHash != pinRules1 {
		t.Fatalf("the resumed task's call: purpose %q hash %s, want version 1's %s", mr.Purpose, mr.PromptHash, pinRules1)
	}

	h.submitTask("s", "t2", &messages.TaskSubmitted{Input: rulesInput, Rules: 1})
	events = h.wait("s")
	var task *messages.TaskSubmitted
	var calls []*messages.ModelRequested
	for _, e := range events {
		switch {
		case e.ID == "t2":
			task = decode[*messages.TaskSubmitted](t, e)
		case task != nil && e.Type == messages.TypeModelRequested:
			calls = append(calls, decode[*messages.ModelRequested](t, e))
		}
	}
	if task == nil || task.Rules != actors.ContextRules {
		t.Fatalf("the new task was recorded with rules %+v, want %d", task, actors.ContextRules)
	}
	if len(calls) != 2 || calls[0].Purpose != pctx.PurposeCondenseSection || calls[0].PromptHash != pinRules2Condense {
		t.Fatalf("the new task's calls: %d, the first %+v; want a condense-section call, then the loop's", len(calls), calls)
	}
	a := actors.Agent{Model: model.Name(), SystemPrompt: "test", Context: actors.ContextOptions{Window: 400, ReservedOutput: 100}}
	if div, err := actors.Verify(a, events); div != nil || err != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}

// Version 12 decides every task as 11 does: what it adds is the node's
// memory.remembered mark (actors.MarksRemembered), no decision. A session
// recorded under 12 verifies as recorded under 11, and a team's task recorded
// under either makes the same events.
func TestRules12DecidesAsRules11(t *testing.T) {
	events, agent, configs := recordedIn(t)
	for _, v := range []int{12, 11} {
		if div, err := actors.VerifyRecorded(actors.Agents{Default: agent}, asRecordedUnder(t, events, v), 1, configs); err != nil || div != nil {
			t.Errorf("the session recorded under rules %d: %v %v", v, div, err)
		}
	}
	team := func(v int) []messages.Envelope {
		agent := newTeamAgent(t, "line", "scripted", actors.Team{Pattern: actors.TeamPipeline, Members: members("a", "b")})
		d := newDelegates(map[string]memberFunc{"a": answer("first\n\nSTATE: city = Oslo\n"), "b": answer("done")})
		return recordTeam(t, agent, v, llm.ScriptStep{}, d, "read the page")
	}
	under11, under12 := team(11), team(12)
	if len(under11) != len(under12) {
		t.Fatalf("the team's task made %d events under 11, %d under 12", len(under11), len(under12))
	}
	for i := 1; i < len(under11); i++ { // the first, task.submitted, records its rules
		a, b := under11[i], under12[i]
		if a.Type != b.Type || !bytes.Equal(a.Payload, b.Payload) {
			t.Fatalf("seq %d: under 11 %s %s, under 12 %s %s", a.Seq, a.Type, a.Payload, b.Type, b.Payload)
		}
	}
	for v, want := range map[int]bool{0: true, 12: true, 11: false, 8: false, 1: false} {
		if actors.MarksRemembered(v) != want {
			t.Errorf("MarksRemembered(%d) = %v, want %v", v, !want, want)
		}
	}
}

// A session's fold skips no event it cannot read: one of a type this build does
// not know fails it, a memory event's type too (a memory namespace's fold skips
// those: memory's TestMemoryFoldSkipsAnUnknownMemoryEventType). A session that
// skipped an event could decide otherwise than the build that wrote it.
func TestSessionFoldRefusesAnUnknownEventType(t *testing.T) {
	for _, typ := range []messages.Type{"memory.future_thing", "task.future_thing"} {
		st := actors.NewSessionState("u")
		if err := st.Apply(env(t, &messages.TaskSubmitted{Input: "hi", Rules: actors.ContextRules}, "u", 1, "task-u")); err != nil {
			t.Fatal(err)
		}
		e := messages.Envelope{ID: "u/b", SessionID: "u", Seq: 2, Type: typ, Version: 1, Actor: "test", Payload: []byte(`{}`)}
		if err := st.Apply(e); !errors.Is(err, messages.ErrUnknownType) {
			t.Errorf("a %s in a session: %v, want %v", typ, err, messages.ErrUnknownType)
		}
	}
}
