package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// recordingModel keeps every request it is asked, in order.
type recordingModel struct {
	llm.Model
	mu   sync.Mutex
	reqs []llm.Request
}

func (m *recordingModel) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, r)
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

// requests returns the requests asked for purpose, in order.
func (m *recordingModel) requests(purpose string) []llm.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []llm.Request
	for _, r := range m.reqs {
		if r.Purpose == purpose {
			out = append(out, r)
		}
	}
	return out
}

func text(s string) llm.ScriptStep { return llm.ScriptStep{Content: s} }

const (
	pass   = `{"verdict": "pass"}`
	revise = "```json\n{\"verdict\": \"revise\", \"issues\": [{\"issue\": \"no unit\", \"suggestion\": \"say it in km\"}]}\n```"
)

// reflecting runs one task of an agent of paradigm p on the scripted steps and
// returns its events and the model's requests.
func reflecting(t *testing.T, p actors.Paradigm, toolset []tools.Tool, steps ...llm.ScriptStep) ([]messages.Envelope, *recordingModel, actors.Agent) {
	t.Helper()
	model := &recordingModel{Model: script(t, steps...)}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, tools: toolset, deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = p
		agent = d.Agent
	}})
	h.submit("r", "task-r", "How far is it?")
	return h.wait("r"), model, agent
}

func completion(t *testing.T, events []messages.Envelope) *messages.TaskCompleted {
	t.Helper()
	last := events[len(events)-1]
	if last.Type != messages.TypeTaskCompleted {
		t.Fatalf("the task did not complete: %s", types(events))
	}
	return decode[*messages.TaskCompleted](t, last)
}

// purposes lists the purposes of the session's model requests ("" for the loop's).
func purposes(t *testing.T, events []messages.Envelope) string {
	t.Helper()
	var out []string
	for _, e := range events {
		if e.Type == messages.TypeModelRequested {
			out = append(out, cmpOr(decode[*messages.ModelRequested](t, e).Purpose, "loop"))
		}
	}
	return strings.Join(out, ",")
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

func TestReflectionPassesInRoundOne(t *testing.T) {
	events, model, agent := reflecting(t, actors.Reflection{}, nil, text("42 km"), text(pass))
	assertGapFree(t, events)
	done := completion(t, events)
	if done.Output != "42 km" || !strings.Contains(done.Note, "passed the answer in round 1 of 2") || done.Steps != 2 {
		t.Fatalf("completion: %+v", done)
	}
	if got := purposes(t, events); got != "loop,critique" {
		t.Fatalf("model calls: %s", got)
	}
	crit := model.requests(actors.PurposeCritique)
	if len(crit) != 1 || len(crit[0].Tools) != 0 || !strings.Contains(crit[0].Messages[1].Content, "How far is it?") ||
		!strings.Contains(crit[0].Messages[1].Content, "42 km") || !strings.Contains(crit[0].Messages[0].Content, `"verdict": "revise"`) {
		t.Fatalf("the critique's request: %+v", crit)
	}
	verifyDeterministic(t, agent, events)
}

// A critic on a model of its own: the critique's request names that chain, and its
// model.requested records that model.
func TestReflectionCriticOnItsOwnModel(t *testing.T) {
	events, model, agent := reflecting(t, actors.Reflection{CriticModels: []string{"judge"}}, nil, text("42 km"), text(pass))
	crit := model.requests(actors.PurposeCritique)
	if len(crit) != 1 || strings.Join(crit[0].Models, ",") != "judge" || len(model.requests("")[0].Models) != 0 {
		t.Fatalf("requests: critique %+v, loop %+v", crit, model.requests(""))
	}
	var models []string
	for _, e := range events {
		if e.Type == messages.TypeModelRequested {
			models = append(models, decode[*messages.ModelRequested](t, e).Model)
		}
	}
	if strings.Join(models, ",") != "scripted,judge" {
		t.Fatalf("recorded models: %v", models)
	}
	verifyDeterministic(t, agent, events)
}

// The critic asks for changes; the loop revises with the issues in its conversation
// and its tools at hand; the revision passes.
func TestReflectionRevisesThenPasses(t *testing.T) {
	var calls int
	conv := funcTool{"convert", func(context.Context, tools.Call) (string, error) { calls++; return "42 km", nil }}
	events, model, agent := reflecting(t, actors.Reflection{}, []tools.Tool{conv},
		text("42"), text(revise),
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "convert", Arguments: `{"v":42}`}}}, text("It is 42 km."),
		text("```json\n{\"verdict\":\"PASS\"}\n```"))
	done := completion(t, events)
	if done.Output != "It is 42 km." || !strings.Contains(done.Note, "round 2 of 2") {
		t.Fatalf("completion: %+v", done)
	}
	if got := purposes(t, events); got != "loop,critique,loop,loop,critique" {
		t.Fatalf("model calls: %s", got)
	}
	if calls != 1 {
		t.Fatalf("the revision called the tool %d times", calls)
	}
	loop := model.requests("")
	rev := loop[1].Messages[len(loop[1].Messages)-1]
	if rev.Role != messages.RoleUser || !strings.Contains(rev.Content, "1. no unit Suggestion: say it in km") {
		t.Fatalf("the revision's request ends with %+v", rev)
	}
	if crit := model.requests(actors.PurposeCritique); !strings.Contains(crit[1].Messages[1].Content, "It is 42 km.") ||
		!strings.Contains(crit[1].Messages[1].Content, "- convert returned: 42 km\n") || !strings.Contains(crit[1].Messages[1].Content, "- assistant: 42\n") {
		t.Fatalf("the second critique reviews %q", crit[1].Messages[1].Content)
	}
	verifyDeterministic(t, agent, events)
}

// A critic that never passes ends after MaxRounds critiques: the task completes with
// the latest revision, its note saying the critique did not pass.
func TestReflectionThatNeverPassesIsBounded(t *testing.T) {
	steps := []llm.ScriptStep{}
	for i := 1; i <= 6; i++ {
		steps = append(steps, text(fmt.Sprintf("draft %d", i)), text(revise))
	}
	events, model, agent := reflecting(t, actors.Reflection{MaxRounds: 3}, nil, steps...)
	done := completion(t, events)
	if done.Output != "draft 3" || !strings.Contains(done.Note, "did not pass in 3 rounds") || !strings.Contains(done.Note, "no unit") {
		t.Fatalf("completion: %+v", done)
	}
	if n := len(model.requests(actors.PurposeCritique)); n != 3 || len(model.reqs) != 6 {
		t.Fatalf("%d critiques, %d model calls: want 3 and 6", n, len(model.reqs))
	}
	verifyDeterministic(t, agent, events)
}

// A revision that the max steps cut short ends the task with the draft it revised,
// noted as not passed.
func TestReflectionRevisionCutShortByMaxSteps(t *testing.T) {
	model := &recordingModel{Model: script(t, text("42"), text(revise),
		llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c1", Name: "convert", Arguments: `{}`}}}, text("never asked"))}
	conv := funcTool{"convert", func(context.Context, tools.Call) (string, error) { return "42 km", nil }}
	var agent actors.Agent
	h := newHarness(t, harnessOpts{model: model, maxSteps: 3, tools: []tools.Tool{conv}, deps: func(d *actors.SessionDeps) {
		d.Agent.Paradigm = actors.Reflection{}
		agent = d.Agent
	}})
	h.submit("m", "task-m", "How far is it?")
	events := h.wait("m")
	done := completion(t, events)
	if done.Output != "42" || !strings.Contains(done.Note, "did not end within the task's 3 model calls") || len(model.reqs) != 3 {
		t.Fatalf("completion: %+v after %d model calls", done, len(model.reqs))
	}
	verifyDeterministic(t, agent, events)
}

// A verdict that cannot be read is asked for once more, saying what was wrong; a
// second one ends the task with the draft, not judged.
func TestReflectionMalformedVerdict(t *testing.T) {
	t.Run("retried", func(t *testing.T) {
		events, model, agent := reflecting(t, actors.Reflection{}, nil, text("42 km"), text("Looks fine to me!"), text(pass))
		done := completion(t, events)
		if done.Output != "42 km" || !strings.Contains(done.Note, "passed") {
			t.Fatalf("completion: %+v", done)
		}
		crit := model.requests(actors.PurposeCritique)
		if len(crit) != 2 || len(crit[1].Messages) != 4 || crit[1].Messages[2].Content != "Looks fine to me!" ||
			!strings.Contains(crit[1].Messages[3].Content, "no JSON object found") {
			t.Fatalf("the retry: %+v", crit)
		}
		verifyDeterministic(t, agent, events)
	})
	t.Run("twice", func(t *testing.T) {
		events, _, agent := reflecting(t, actors.Reflection{}, nil, text("42 km"), text(`{"verdict": "maybe"}`), text(`{"verdict": "revise"}`), text(pass))
		done := completion(t, events)
		if done.Output != "42 km" || !strings.Contains(done.Note, "could not be read twice") || !strings.Contains(done.Note, "without \"issues\"") {
			t.Fatalf("completion: %+v", done)
		}
		if got := purposes(t, events); got != "loop,critique,critique" {
			t.Fatalf("model calls: %s", got)
		}
		verifyDeterministic(t, agent, events)
	})
}

// The critic's failing model call fails the task, as the loop's does.
func TestReflectionCriticModelErrorFailsTheTask(t *testing.T) {
	events, _, _ := reflecting(t, actors.Reflection{}, nil, text("42 km")) // no step 2: the script errs
	last := events[len(events)-1]
	if f := decode[*messages.TaskFailed](t, last); f.Reason != messages.ReasonModelError || !strings.Contains(f.Error, "the critic: ") {
		t.Fatalf("failure: %+v", f)
	}
}

// A session restarted while its critique was in flight refolds, asks the critic
// again under the same key, and never asks the model the answered draft's call.
func TestReflectionResumesMidCritique(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Paradigm: actors.Reflection{}}
	st := actors.NewSessionState("s").WithAgents(actors.Agents{Default: agent})
	var recorded []messages.Envelope
	add := func(p messages.Payload) {
		e := env(t, p, "s", st.LastSeq+1, "t")
		e.ID = fmt.Sprintf("s/%d", e.Seq)
		if p.MessageType() == messages.TypeTaskSubmitted {
			e.ID = "t"
		}
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
		recorded = append(recorded, e)
	}
	decide := func() messages.Payload { return st.Decide(agent, st.LastSeq+1, 0).Payload }
	add(&messages.TaskSubmitted{Input: "How far is it?"})
	draft := decide().(*messages.ModelRequested)
	add(draft)
	add(&messages.ModelResponded{Key: draft.Key, Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, Content: "42 km"}})
	crit := decide().(*messages.ModelRequested)
	if crit.Purpose != actors.PurposeCritique {
		t.Fatalf("decided %+v", crit)
	}
	add(crit)
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Append(ctx, recorded); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	model := &countingModel{Model: script(t, text("never asked"), text(pass))}
	h := newHarness(t, harnessOpts{dir: dir, model: model, deps: func(d *actors.SessionDeps) { d.Agent = agent }})
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	events := h.wait("s")
	assertGapFree(t, events)
	if model.calls[draft.Key] != 0 || model.calls[crit.Key] != 1 || model.total() != 1 {
		t.Fatalf("model calls: %v (only the critique %s, with its recorded key)", model.calls, crit.Key)
	}
	if done := completion(t, events); done.Output != "42 km" {
		t.Fatalf("completion: %+v", done)
	}
}
