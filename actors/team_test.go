package actors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// memberFunc scripts a member: its answer to the task it is handed, on the n-th time
// (from 1) it is handed work.
type memberFunc func(task string, n int) (string, error)

// delegates is a scripted delegate tool: each member is a function, and every call
// is counted by its key, as a child session would be started once per key.
type delegates struct {
	mu      sync.Mutex
	members map[string]memberFunc
	perKey  map[string]int
	handed  map[string][]string // member → the tasks it was handed, in order
	// block, when set, holds the calls to these members until their context ends.
	block map[string]bool
	// spend is what each call to a member reports it spent on models
	// (tools.ReportUsage), read when the tool is a spender (spendingTool).
	spend map[string]messages.Usage
}

func newDelegates(members map[string]memberFunc) *delegates {
	return &delegates{members: members, perKey: map[string]int{}, handed: map[string][]string{}, block: map[string]bool{}}
}

func (d *delegates) tool() tools.Tool {
	return funcTool{actors.DelegateTool, func(ctx context.Context, c tools.Call) (string, error) {
		var args struct{ Agent, Task string }
		if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
			return "", err
		}
		d.mu.Lock()
		d.perKey[c.Key]++
		d.handed[args.Agent] = append(d.handed[args.Agent], args.Task)
		n := len(d.handed[args.Agent])
		fn, block, spent := d.members[args.Agent], d.block[args.Agent], d.spend[args.Agent]
		d.mu.Unlock()
		tools.ReportUsage(ctx, spent)
		if block {
			<-ctx.Done()
			return "", ctx.Err()
		}
		if fn == nil {
			return "", fmt.Errorf("sub-agent %s failed (unknown_agent)", args.Agent)
		}
		return fn(args.Task, n)
	}}
}

// spendingTool is the delegate tool as a sub-agent is: its calls report what
// they spent (spend), which counts against the team's budgets.
func (d *delegates) spendingTool() tools.Tool { return spenderTool{d.tool().(funcTool)} }

func (d *delegates) tasks(member string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.handed[member]...)
}

func answer(s string) memberFunc { return func(string, int) (string, error) { return s, nil } }

func newTeamAgent(t *testing.T, name, model string, cfg actors.Team) actors.Agent {
	t.Helper()
	p, err := actors.NewTeam(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return actors.Agent{Name: name, Model: model, SystemPrompt: "You lead a team.", Paradigm: p,
		Tools: []messages.ToolSpec{{Name: actors.DelegateTool, Description: "test tool"}}}
}

func members(names ...string) []actors.TeamMember {
	ms := make([]actors.TeamMember, len(names))
	for i, n := range names {
		ms[i] = actors.TeamMember{Name: n, Description: "The " + n + "."}
	}
	return ms
}

// teamRun runs one task of the team agent with these members and returns its events.
func runTeam(t *testing.T, agent actors.Agent, model llm.Model, d *delegates, input string) []messages.Envelope {
	t.Helper()
	if model == nil {
		model = script(t, llm.ScriptStep{Content: "unused"})
	}
	tool := d.tool()
	if d.spend != nil {
		tool = d.spendingTool()
	}
	h := newHarness(t, harnessOpts{model: model, tools: []tools.Tool{tool}, deps: func(deps *actors.SessionDeps) {
		deps.Named = map[string]actors.Agent{agent.Name: agent}
	}})
	h.submitTo("s", "task-1", agent.Name, input)
	events := h.wait("s")
	assertGapFree(t, events)
	return events
}

// submitTo submits a task naming an agent.
func (h *harness) submitTo(session, id, agent, input string) {
	h.t.Helper()
	e, err := messages.NewEnvelope(&messages.TaskSubmitted{Input: input, Agent: agent})
	if err != nil {
		h.t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = id, session, "test"
	if _, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result(); err != nil {
		h.t.Fatal(err)
	}
}

// stateUpdates returns the team's state updates, as "section/op/key by: value".
func stateUpdates(t *testing.T, events []messages.Envelope) []string {
	var out []string
	for _, e := range events {
		if e.Type == messages.TypeTeamStateUpdated {
			u := decode[*messages.TeamStateUpdated](t, e)
			out = append(out, fmt.Sprintf("%s/%s/%s by %s: %s", u.Section, u.Op, u.Key, u.By, u.Value))
		}
	}
	return out
}

// delegations returns the team's delegate calls, as "purpose→agent".
func delegations(t *testing.T, events []messages.Envelope) []string {
	var out []string
	for _, e := range events {
		if e.Type == messages.TypeToolCallRequested {
			r := decode[*messages.ToolCallRequested](t, e)
			var args struct{ Agent string }
			_ = json.Unmarshal([]byte(r.Arguments), &args)
			out = append(out, r.Purpose+"→"+args.Agent)
		}
	}
	return out
}

func lastPayload(t *testing.T, events []messages.Envelope) messages.Payload {
	t.Helper()
	p, err := events[len(events)-1].Decode()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantCompleted(t *testing.T, events []messages.Envelope, output string) {
	t.Helper()
	p, ok := lastPayload(t, events).(*messages.TaskCompleted)
	if !ok || p.Output != output {
		t.Fatalf("the task ended with %+v; want completed with %q\nevents: %s", lastPayload(t, events), output, types(events))
	}
}

func wantFailed(t *testing.T, events []messages.Envelope, reason, contains string) *messages.TaskFailed {
	t.Helper()
	p, ok := lastPayload(t, events).(*messages.TaskFailed)
	if !ok || p.Reason != reason || !strings.Contains(p.Error, contains) {
		t.Fatalf("the task ended with %+v; want failed (%s) saying %q", lastPayload(t, events), reason, contains)
	}
	return p
}

func verifyTeam(t *testing.T, agent actors.Agent, events []messages.Envelope) {
	t.Helper()
	div, err := actors.VerifyAmong(actors.Agents{Named: map[string]actors.Agent{agent.Name: agent}}, events)
	if err != nil || div != nil {
		t.Fatalf("replay verify of the team's session: %v %v", div, err)
	}
}

func TestTeamOrchestratorRoutesByRuleAndRecordsWhy(t *testing.T) {
	agent := newTeamAgent(t, "desk", "scripted", actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "writer"),
		Routes: []actors.TeamRoute{{Match: `\d\s*[-+*/]\s*\d`, Member: "calc"}}, Fallback: "writer"})
	d := newDelegates(map[string]memberFunc{"calc": answer("144"), "writer": answer("prose")})
	events := runTeam(t, agent, nil, d, "What is 12 * 12?")
	wantCompleted(t, events, "144")
	if got := strings.Join(delegations(t, events), " "); got != "work→calc" {
		t.Fatalf("delegations: %s", got)
	}
	ups := stateUpdates(t, events)
	if len(ups) != 2 || !strings.Contains(ups[0], `global/append/routing by team: calc: rule 1 matches`) || ups[1] != "calc/merge/answer by calc: 144" {
		t.Fatalf("state updates: %q", ups)
	}
	task := d.tasks("calc")[0]
	if !strings.HasPrefix(task, "What is 12 * 12?"+llm.TeamBrief) || !strings.Contains(task, `<routing by="team">calc: rule 1`) {
		t.Fatalf("the worker's task does not carry the task and the team's state:\n%s", task)
	}
	verifyTeam(t, agent, events)

	// No rule matches: the fallback, and why.
	d = newDelegates(map[string]memberFunc{"calc": answer("144"), "writer": answer("a haiku")})
	events = runTeam(t, agent, nil, d, "Write a haiku")
	wantCompleted(t, events, "a haiku")
	if ups := stateUpdates(t, events); !strings.Contains(ups[0], "writer: the fallback: no rule matches") {
		t.Fatalf("state updates: %q", ups)
	}
}

func TestTeamModelRoutingToAnUnknownMemberFallsBack(t *testing.T) {
	agent := newTeamAgent(t, "desk", "scripted", actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "writer"),
		ModelRouting: true, Fallback: "writer"})
	model := &countingModel{Model: script(t, llm.ScriptStep{Content: `{"member": "poet", "reason": "it rhymes"}`})}
	d := newDelegates(map[string]memberFunc{"calc": answer("no"), "writer": answer("roses are red")})
	events := runTeam(t, agent, model, d, "A poem, please")
	wantCompleted(t, events, "roses are red")
	var req *messages.ModelRequested
	for _, e := range events {
		if e.Type == messages.TypeModelRequested {
			req = decode[*messages.ModelRequested](t, e)
		}
	}
	if req == nil || req.Purpose != "route" || model.total() != 1 {
		t.Fatalf("the routing call: %+v, %d model calls", req, model.total())
	}
	ups := stateUpdates(t, events)
	if !strings.Contains(ups[0], `writer: the fallback: the model chose "poet", which is not a member (calc, writer); its reason: it rhymes`) {
		t.Fatalf("the fallback is not recorded with its reason: %q", ups)
	}
	verifyTeam(t, agent, events)

	// A member the model names is taken, with its reason.
	model = &countingModel{Model: script(t, llm.ScriptStep{Content: "Sure! ```json\n{\"member\": \"calc\", \"reason\": \"arithmetic\"}\n```"})}
	events = runTeam(t, agent, model, newDelegates(map[string]memberFunc{"calc": answer("4")}), "2+2")
	wantCompleted(t, events, "4")
	if ups := stateUpdates(t, events); !strings.Contains(ups[0], "calc: the model's choice: arithmetic") {
		t.Fatalf("state updates: %q", ups)
	}
}

func TestTeamRedispatchesAResultThatFailsItsCheck(t *testing.T) {
	cfg := actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "backup"),
		Routes: []actors.TeamRoute{{Match: "sum", Member: "calc"}}, Fallback: "backup", Check: actors.TeamCheck{Regex: `^\d+$`}, Redispatch: 2}
	agent := newTeamAgent(t, "desk", "scripted", cfg)
	d := newDelegates(map[string]memberFunc{"calc": answer("twelve, I think"), "backup": answer("12")})
	events := runTeam(t, agent, nil, d, "sum 5 and 7")
	wantCompleted(t, events, "12")
	if got := strings.Join(delegations(t, events), " "); got != "work→calc work→backup" {
		t.Fatalf("delegations: %s", got)
	}
	if task := d.tasks("backup")[0]; !strings.Contains(task, `failed the team's check: the answer does not match "^\\d+$"`) ||
		!strings.Contains(task, `<answer by="calc">twelve, I think</answer>`) {
		t.Fatalf("the re-dispatched task does not say what failed:\n%s", task)
	}
	verifyTeam(t, agent, events)

	// Every answer fails: after the fallback, the same member again, then the end.
	d = newDelegates(map[string]memberFunc{"calc": answer("?"), "backup": answer("")})
	events = runTeam(t, agent, nil, d, "sum 5 and 7")
	wantFailed(t, events, messages.ReasonCheckFailed, "after 2 re-dispatches")
	if got := strings.Join(delegations(t, events), " "); got != "work→calc work→backup work→backup" {
		t.Fatalf("delegations: %s", got)
	}

	// A critic checks: FAIL re-dispatches, PASS accepts; a member's error is a failure.
	cfg.Check = actors.TeamCheck{Critic: "critic"}
	agent = newTeamAgent(t, "desk", "scripted", cfg)
	d = newDelegates(map[string]memberFunc{
		"calc":   func(string, int) (string, error) { return "", fmt.Errorf("sub-agent calc failed (max_steps)") },
		"backup": answer("12"),
		"critic": func(task string, n int) (string, error) {
			if strings.Contains(task, `<answer by="backup">12</answer>`) {
				return "PASS", nil
			}
			return "FAIL: no answer", nil
		},
	})
	events = runTeam(t, agent, nil, d, "sum 5 and 7")
	wantCompleted(t, events, "12")
	if got := strings.Join(delegations(t, events), " "); got != "work→calc work→backup check→critic" {
		t.Fatalf("delegations: %s", got)
	}
	verifyTeam(t, agent, events)

	// Without re-dispatches, a member that fails fails the task with its reason.
	cfg.Check, cfg.Redispatch = actors.TeamCheck{}, 0
	agent = newTeamAgent(t, "desk", "scripted", cfg)
	events = runTeam(t, agent, nil, newDelegates(nil), "sum 5 and 7")
	wantFailed(t, events, messages.ReasonMemberFailed, "calc failed: sub-agent calc failed (unknown_agent); after 0 re-dispatches")
}

func TestTeamPipelineRunsMembersInSequenceAndKeepsConflictingWrites(t *testing.T) {
	agent := newTeamAgent(t, "line", "scripted", actors.Team{Pattern: actors.TeamPipeline, Members: members("a", "b", "c")})
	d := newDelegates(map[string]memberFunc{
		"a": answer("draft\nSTATE: city = Oslo"),
		"b": func(task string, _ int) (string, error) {
			if !strings.Contains(task, `<answer by="a">draft`) || !strings.Contains(task, `Build on the answer of "a"`) {
				return "", fmt.Errorf("b did not get a's answer")
			}
			return "edited\nSTATE: city = Paris", nil
		},
		"c": answer("final"),
	})
	events := runTeam(t, agent, nil, d, "write")
	wantCompleted(t, events, "final")
	if got := strings.Join(delegations(t, events), " "); got != "stage→a stage→b stage→c" {
		t.Fatalf("delegations: %s", got)
	}
	// Two members set the same key: both values stay, each with its writer.
	c := d.tasks("c")[0]
	if !strings.Contains(c, `<city by="a">Oslo</city>`+"\n"+`<city by="b">Paris</city>`) {
		t.Fatalf("a conflicting write was lost:\n%s", c)
	}
	verifyTeam(t, agent, events)

	// A stage that fails ends the pipeline.
	d = newDelegates(map[string]memberFunc{"a": answer("x")})
	events = runTeam(t, agent, nil, d, "write")
	wantFailed(t, events, messages.ReasonMemberFailed, "stage 2 (b) failed")
}

func TestTeamFanOutAggregates(t *testing.T) {
	agent := newTeamAgent(t, "panel", "scripted", actors.Team{Pattern: actors.TeamFanOut, Members: members("a", "b", "c"), Aggregator: "agg"})
	d := newDelegates(map[string]memberFunc{"a": answer("A"), "b": answer("B"), "c": answer("C"),
		"agg": func(task string, _ int) (string, error) {
			for _, m := range []string{"a", "b", "c"} {
				if !strings.Contains(task, fmt.Sprintf(`<answer by=%q>%s</answer>`, m, strings.ToUpper(m))) {
					return "", fmt.Errorf("the aggregator misses %s's answer", m)
				}
			}
			return "A+B+C", nil
		}})
	events := runTeam(t, agent, nil, d, "ideas")
	wantCompleted(t, events, "A+B+C")
	if got := strings.Join(delegations(t, events), " "); got != "branch→a branch→b branch→c aggregate→agg" {
		t.Fatalf("delegations: %s", got)
	}
	verifyTeam(t, agent, events)

	// Without an aggregator, the answers one after the other; a failed branch says so.
	agent = newTeamAgent(t, "panel", "scripted", actors.Team{Pattern: actors.TeamFanOut, Members: members("a", "b")})
	events = runTeam(t, agent, nil, newDelegates(map[string]memberFunc{"a": answer("A")}), "ideas")
	wantCompleted(t, events, "## a\nA\n\n## b (failed)\nsub-agent b failed (unknown_agent)")
}

func TestTeamDebateRunsBoundedRounds(t *testing.T) {
	agent := newTeamAgent(t, "court", "scripted", actors.Team{Pattern: actors.TeamDebate, Members: members("pro", "con"), Judge: "judge", Rounds: 2})
	d := newDelegates(map[string]memberFunc{
		"pro": func(_ string, n int) (string, error) { return fmt.Sprintf("pro %d", n), nil },
		"con": func(_ string, n int) (string, error) { return fmt.Sprintf("con %d", n), nil },
		"judge": func(task string, n int) (string, error) {
			if n == 1 {
				return `{"verdict": "revise", "feedback": "cite sources"}`, nil
			}
			if !strings.Contains(task, "last round") {
				return "", fmt.Errorf("round 2 is the last")
			}
			return `{"verdict": "accept", "winner": "con", "reason": "sourced"}`, nil
		}})
	events := runTeam(t, agent, nil, d, "tabs or spaces?")
	wantCompleted(t, events, "con 2")
	if got := strings.Join(delegations(t, events), " "); got != "propose→pro propose→con judge→judge propose→pro propose→con judge→judge" {
		t.Fatalf("delegations: %s", got)
	}
	if pro2 := d.tasks("pro")[1]; !strings.Contains(pro2, "Note: round 1: revise: cite sources") {
		t.Fatalf("round 2 does not carry the judge's feedback:\n%s", pro2)
	}
	verifyTeam(t, agent, events)

	// A judge that never accepts: the rounds end it.
	d = newDelegates(map[string]memberFunc{"pro": answer("p"), "con": answer("c"), "judge": answer(`{"verdict": "revise", "feedback": "no"}`)})
	events = runTeam(t, agent, nil, d, "tabs or spaces?")
	wantFailed(t, events, messages.ReasonNoVerdict, "accepted no proposal in 2 rounds")
}

func TestTeamHandoffEndsACycleWithItsReason(t *testing.T) {
	agent := newTeamAgent(t, "front", "scripted", actors.Team{Pattern: actors.TeamHandoff, Members: members("triage", "billing", "tech")})
	d := newDelegates(map[string]memberFunc{
		"triage":  answer("HANDOFF: billing: a refund"),
		"billing": answer("Not mine.\nHANDOFF: tech: looks technical"),
		"tech":    answer("HANDOFF: triage: back to you"),
	})
	events := runTeam(t, agent, nil, d, "my invoice crashed")
	wantFailed(t, events, messages.ReasonHandoffCycle, "handoff cycle: triage → billing → tech → triage")
	if got := strings.Join(delegations(t, events), " "); got != "handoff→triage handoff→billing handoff→tech" {
		t.Fatalf("delegations: %s", got)
	}
	if tech := d.tasks("tech")[0]; !strings.Contains(tech, "billing handed the conversation to you: looks technical") || !strings.Contains(tech, "- triage: The triage.") {
		t.Fatalf("tech's task:\n%s", tech)
	}
	verifyTeam(t, agent, events)

	// A chain that answers; one past max_handoffs; one to a stranger.
	d = newDelegates(map[string]memberFunc{"triage": answer("HANDOFF: tech"), "tech": answer("rebooted")})
	wantCompleted(t, runTeam(t, agent, nil, d, "crash"), "rebooted")
	short := newTeamAgent(t, "front", "scripted", actors.Team{Pattern: actors.TeamHandoff, Members: members("triage", "billing", "tech"), MaxHandoffs: 1})
	d = newDelegates(map[string]memberFunc{"triage": answer("HANDOFF: billing"), "billing": answer("HANDOFF: tech")})
	wantFailed(t, runTeam(t, short, nil, d, "x"), messages.ReasonMaxHandoffs, "after 1 handoffs")
	d = newDelegates(map[string]memberFunc{"triage": answer("HANDOFF: legal: contract")})
	wantFailed(t, runTeam(t, agent, nil, d, "x"), messages.ReasonMemberFailed, `"legal", which is not a member`)
}

// droppingStore writes nothing once dropped: what a killed process leaves in the log.
type droppingStore struct {
	actors.EventStore
	dropped atomic.Bool
}

func (s *droppingStore) Append(ctx context.Context, events []messages.Envelope) error {
	if s.dropped.Load() {
		return nil
	}
	return s.EventStore.Append(ctx, events)
}

func TestTeamFanOutResumesAfterAKillWithoutRepeatingAFinishedBranch(t *testing.T) {
	dir := t.TempDir()
	agent := newTeamAgent(t, "panel", "scripted", actors.Team{Pattern: actors.TeamFanOut, Members: members("a", "b", "c"), Aggregator: "agg"})
	named := map[string]actors.Agent{agent.Name: agent}
	model := script(t, llm.ScriptStep{Content: "unused"})

	// The first process: a and b answer, c works until the process dies.
	first := newDelegates(map[string]memberFunc{"a": answer("A"), "b": answer("B")})
	first.block["c"] = true
	ctx := context.Background()
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	store := &droppingStore{EventStore: lg}
	reg, err := tools.NewRegistry(first.tool())
	if err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	effects := actors.NewLocalEffects(actors.LocalEffectsConfig{Model: model, Tools: reg})
	host := sys.Root.Spawn(actors.NewSessionHostProps(actors.SessionDeps{Store: store, Effects: effects, Named: named,
		Agent: actors.Agent{Model: "scripted"}}))
	h1 := &harness{t: t, system: sys, host: host, log: lg, store: store, effects: effects}
	h1.submitTo("s", "task-1", agent.Name, "ideas")
	var before []messages.Envelope
	for deadline := time.Now().Add(10 * time.Second); ; {
		if before, err = lg.Read(ctx, "s", 1); err != nil {
			t.Fatal(err)
		}
		// Their answers are recorded; the team records them in its state once c's is
		// in too (from rules 15: rulesTeamAnswerOrder).
		if n := strings.Count(types(before), string(messages.TypeToolCallCompleted)); n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a and b did not answer in 10 s: %s", types(before))
		}
		time.Sleep(2 * time.Millisecond)
	}
	// kill -9: nothing more reaches the log.
	store.dropped.Store(true)
	_ = sys.Root.PoisonFuture(host).Wait()
	_ = effects.Close()
	sys.Shutdown()
	_ = lg.Close()
	var cKey string
	for _, e := range before {
		if r, ok := mustDecode(t, e).(*messages.ToolCallRequested); ok && strings.Contains(r.Arguments, `"agent":"c"`) {
			cKey = r.Key
		}
	}

	// The next process resumes the session from its log.
	second := newDelegates(map[string]memberFunc{"a": answer("A again"), "b": answer("B again"), "c": answer("C"), "agg": answer("A+B+C")})
	h := newHarness(t, harnessOpts{dir: dir, model: model, tools: []tools.Tool{second.tool()}, deps: func(deps *actors.SessionDeps) { deps.Named = named }})
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	events := h.wait("s")
	assertGapFree(t, events)
	wantCompleted(t, events, "A+B+C")
	if len(second.tasks("a")) != 0 || len(second.tasks("b")) != 0 {
		t.Fatalf("a finished branch was performed again: a %d, b %d times", len(second.tasks("a")), len(second.tasks("b")))
	}
	if second.perKey[cKey] != 1 || len(second.tasks("c")) != 1 || len(second.tasks("agg")) != 1 {
		t.Fatalf("after the restart: c performed %d times under its key %s (%v), the aggregator %d times; want once each",
			second.perKey[cKey], cKey, second.perKey, len(second.tasks("agg")))
	}
	if got := strings.Join(delegations(t, events), " "); got != "branch→a branch→b branch→c aggregate→agg" {
		t.Fatalf("delegations: %s", got)
	}
	verifyTeam(t, agent, events)
}

func mustDecode(t *testing.T, e messages.Envelope) messages.Payload {
	t.Helper()
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTeamVerifyReportsAChangedTeam(t *testing.T) {
	cfg := actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "writer"), ModelRouting: true, Fallback: "writer"}
	agent := newTeamAgent(t, "desk", "scripted", cfg)
	events := runTeam(t, agent, script(t, llm.ScriptStep{Content: `{"member": "calc", "reason": "numbers"}`}),
		newDelegates(map[string]memberFunc{"calc": answer("4")}), "2+2")
	verifyTeam(t, agent, events)
	// The routing prompt lists the members: another description is another prompt.
	cfg.Members[0].Description = "Counts beans."
	changed := newTeamAgent(t, "desk", "scripted", cfg)
	div, err := actors.VerifyAmong(actors.Agents{Named: map[string]actors.Agent{"desk": changed}}, events)
	if err != nil || div == nil || !strings.Contains(div.Expected, `"purpose":"route"`) || !strings.Contains(div.Actual, "prompt_hash") {
		t.Fatalf("a changed routing prompt must diverge at the routing call: %v %v", div, err)
	}
	// Another fallback changes the recorded reason... and the prompt before it.
	cfg.Members[0].Description = "The calc."
	cfg.Routes = []actors.TeamRoute{{Match: `\+`, Member: "writer"}}
	changed = newTeamAgent(t, "desk", "scripted", cfg)
	div, err = actors.VerifyAmong(actors.Agents{Named: map[string]actors.Agent{"desk": changed}}, events)
	if err != nil || div == nil || !strings.Contains(div.Expected, "model.requested") || !strings.Contains(div.Actual, "team.state_updated") {
		t.Fatalf("a new rule must diverge where it routes: %v %v", div, err)
	}
}

func TestTeamVerifyComparesTheStateUpdates(t *testing.T) {
	cfg := actors.Team{Pattern: actors.TeamOrchestrator, Members: members("calc", "writer"), Fallback: "writer",
		Routes: []actors.TeamRoute{{Match: `\+`, Member: "calc"}}}
	agent := newTeamAgent(t, "desk", "scripted", cfg)
	events := runTeam(t, agent, nil, newDelegates(map[string]memberFunc{"calc": answer("4")}), "2+2")
	verifyTeam(t, agent, events)
	// The same member by another rule: only the recorded reason differs.
	cfg.Routes[0].Match = `[+]`
	changed := newTeamAgent(t, "desk", "scripted", cfg)
	div, err := actors.VerifyAmong(actors.Agents{Named: map[string]actors.Agent{"desk": changed}}, events)
	if err != nil || div == nil || div.Seq != 2 || !strings.Contains(div.Expected, "team.state_updated") || !strings.Contains(div.Actual, `rule 1 matches \"[+]\"`) {
		t.Fatalf("a changed routing reason must diverge at its state update: %v %v", div, err)
	}
}

func TestNewTeamRefusesBadSettings(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  actors.Team
		want string
	}{
		"pattern":   {actors.Team{Pattern: "swarm", Members: members("a")}, `unknown pattern "swarm"`},
		"members":   {actors.Team{Pattern: actors.TeamPipeline}, "no members"},
		"twice":     {actors.Team{Pattern: actors.TeamPipeline, Members: members("a", "a")}, `member "a" is listed twice`},
		"fallback":  {actors.Team{Pattern: actors.TeamOrchestrator, Members: members("a"), Fallback: "z"}, `fallback "z": want one of the members (a)`},
		"route":     {actors.Team{Pattern: actors.TeamOrchestrator, Members: members("a"), Fallback: "a", Routes: []actors.TeamRoute{{Match: "x", Member: "b"}}}, `route 1: member "b"`},
		"regex":     {actors.Team{Pattern: actors.TeamOrchestrator, Members: members("a"), Fallback: "a", Routes: []actors.TeamRoute{{Match: "(", Member: "a"}}}, `route 1: match "("`},
		"checks":    {actors.Team{Pattern: actors.TeamOrchestrator, Members: members("a"), Fallback: "a", Check: actors.TeamCheck{NonEmpty: true, Critic: "c"}}, "give one of"},
		"judge":     {actors.Team{Pattern: actors.TeamDebate, Members: members("a")}, "no judge"},
		"rounds":    {actors.Team{Pattern: actors.TeamDebate, Members: members("a"), Judge: "j", Rounds: 11}, "rounds 11"},
		"handoffs":  {actors.Team{Pattern: actors.TeamHandoff, Members: members("a"), MaxHandoffs: -1}, "max_handoffs -1"},
		"global":    {actors.Team{Pattern: actors.TeamPipeline, Members: members("global")}, `name "global"`},
		"redispath": {actors.Team{Pattern: actors.TeamOrchestrator, Members: members("a"), Fallback: "a", Redispatch: 9}, "redispatch 9"},
	} {
		if _, err := actors.NewTeam(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", name, err, c.want)
		}
	}
}
