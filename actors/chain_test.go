package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/eventlog/sqlite"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// recorder is a tool that notes each call's key and arguments, and fails when its
// arguments say "fail".
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) tool() tools.Tool {
	return funcTool{"rec", func(_ context.Context, c tools.Call) (string, error) {
		r.mu.Lock()
		r.calls = append(r.calls, c.Key+"="+c.Arguments)
		r.mu.Unlock()
		if strings.Contains(c.Arguments, "fail") {
			return "", errors.New("asked to fail")
		}
		return fmt.Sprintf(`{"got":%s}`, c.Arguments), nil
	}}
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// twoSteps is a chain of two calls of rec: the second is given the first's result.
var twoSteps = tools.Chain{
	Name: "two_steps", Description: "Records x, then records what the first step answered.",
	InputSchema: []byte(`{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`),
	Steps: []tools.ChainStep{
		{Name: "first", Tool: "rec", Args: `{"x": {{json .args.x}}}`},
		{Name: "second", Tool: "rec", Args: `{"prev": {{json .steps.first.json.got.x}}}`},
	},
	Output: `first said {{.steps.first.output}}, second said {{.steps.second.output}}`,
}

// chainAgent returns the tools of a session with rec and the chain, and a deps
// option that gives its agent the chain.
func chainAgent(t *testing.T, rec tools.Tool) ([]tools.Tool, func(*actors.SessionDeps)) {
	t.Helper()
	chains, err := tools.NewChainTools([]tools.Chain{twoSteps}, []tools.Tool{rec})
	if err != nil {
		t.Fatal(err)
	}
	return []tools.Tool{rec, chains[0]}, func(d *actors.SessionDeps) {
		d.Agent.Chains = map[string]*tools.ChainTool{twoSteps.Name: chains[0]}
	}
}

// lastRequest keeps the messages of the latest model request.
type lastRequest struct {
	llm.Model
	mu   sync.Mutex
	msgs []messages.ChatMessage
}

func (m *lastRequest) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.msgs = r.Messages
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func TestChainStepsAreRecordedEffectsAndTheModelGetsTheResult(t *testing.T) {
	rec := &recorder{}
	list, withChain := chainAgent(t, rec.tool())
	model := &lastRequest{Model: script(t,
		calls(messages.ToolCall{ID: "c1", Name: "two_steps", Arguments: `{"x":"hello"}`}),
		calls(messages.ToolCall{ID: "c2", Name: "two_steps", Arguments: `{"x":"fail"}`}),
		llm.ScriptStep{Content: "done"})}
	h := newHarness(t, harnessOpts{model: model, tools: list, deps: withChain})
	h.submit("s", "t", "go")
	events := h.wait("s")
	assertGapFree(t, events)

	want := "1:task.submitted 2:model.requested 3:model.responded 4:tool.requested 5:tool.requested 6:tool.completed 7:tool.requested 8:tool.completed 9:tool.completed " +
		"10:model.requested 11:model.responded 12:tool.requested 13:tool.requested 14:tool.completed 15:tool.completed " +
		"16:model.requested 17:model.responded 18:task.completed"
	if got := types(events); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	// Each step is an effect of its own, keyed by the seq of its request and linked
	// to the chain's call; the chain's call is not performed as a tool.
	chainCall := decode[*messages.ToolCallRequested](t, events[3])
	first := decode[*messages.ToolCallRequested](t, events[4])
	second := decode[*messages.ToolCallRequested](t, events[6])
	if first.Chain != chainCall.Key || first.ChainStep != "first" || first.Key != "s/5" || first.Tool != "rec" ||
		second.Chain != chainCall.Key || second.ChainStep != "second" || second.Key != "s/7" || second.Arguments != `{"prev":"hello"}` {
		t.Fatalf("steps: %+v, %+v (chain call %s)", first, second, chainCall.Key)
	}
	if got := rec.seen(); len(got) != 3 || got[0] != `s/5={"x":"hello"}` || got[1] != `s/7={"prev":"hello"}` || got[2] != `s/13={"x":"fail"}` {
		t.Fatalf("tool calls: %v", got)
	}
	result := decode[*messages.ToolCallCompleted](t, events[8])
	wantResult := `first said {"got":{"x":"hello"}}, second said {"got":{"prev":"hello"}}`
	if result.Key != chainCall.Key || result.Result != wantResult || events[8].Actor != "session" {
		t.Fatalf("the chain's result: %+v by %s", result, events[8].Actor)
	}
	// A failing step ends its chain, with an error that names the step: the steps
	// after it do not run.
	failed := decode[*messages.ToolCallCompleted](t, events[14])
	if !strings.Contains(failed.Error, `stopped at step 1 of 2, "first" (rec): asked to fail`) {
		t.Fatalf("the failed chain's result: %+v", failed)
	}
	// The model read the chains' results, not their steps'.
	var toolMsgs []string
	model.mu.Lock()
	for _, m := range model.msgs {
		if m.Role == messages.RoleTool {
			toolMsgs = append(toolMsgs, m.Name+": "+m.Content)
		}
	}
	model.mu.Unlock()
	if len(toolMsgs) != 2 || toolMsgs[0] != "two_steps: "+wantResult || !strings.HasPrefix(toolMsgs[1], "two_steps: error: chain two_steps stopped at step 1") {
		t.Fatalf("tool messages the model read: %q", toolMsgs)
	}
	// The run is deterministic: replay verification re-decides every step.
	agent := actors.Agent{Model: model.Name(), SystemPrompt: "test", Tools: mustRegistry(t, list).Specs()}
	withAgent := actors.SessionDeps{Agent: agent}
	withChain(&withAgent)
	if div, err := actors.Verify(withAgent.Agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}

func mustRegistry(t *testing.T, list []tools.Tool) *tools.Registry {
	t.Helper()
	reg, err := tools.NewRegistry(list...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestChainResumesAfterARestartWithoutRepeatingAFinishedStep(t *testing.T) {
	rec := &recorder{}
	list, withChain := chainAgent(t, rec.tool())
	resumeMidChain(t, rec, list, withChain, messages.ToolCall{ID: "c1", Name: "two_steps", Arguments: `{"x":"hello"}`})
}

// resumeMidChain records a session that died mid-chain, the model having made call
// (a call that runs twoSteps): the chain's first step answered, its second was
// requested. It resumes the session and checks that only the second step runs.
func resumeMidChain(t *testing.T, rec *recorder, list []tools.Tool, withChain func(*actors.SessionDeps), call messages.ToolCall) {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	deps := actors.SessionDeps{Agent: actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: mustRegistry(t, list).Specs()}}
	withChain(&deps)
	agent := deps.Agent

	// A session recorded by an earlier process: the model called the chain, its first
	// step answered, its second was requested; then the process died.
	st := actors.NewSessionState("s")
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
	decide := func() messages.Payload {
		d := st.Decide(agent, st.LastSeq+1, 0)
		if d == nil {
			t.Fatal("the agent decided nothing")
		}
		return d.Payload
	}
	add(&messages.TaskSubmitted{Input: "go"})
	mr := decide().(*messages.ModelRequested)
	add(mr)
	add(&messages.ModelResponded{Key: mr.Key, Model: "scripted", Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{call}}})
	add(decide()) // the chain's call
	first := decide().(*messages.ToolCallRequested)
	add(first)
	if pending := st.PendingCalls(); len(pending) != 1 || pending[0].Request.Key != first.Key {
		t.Fatalf("pending: %+v (want only the first step)", pending)
	}
	add(&messages.ToolCallCompleted{Key: first.Key, CallID: "c1", Tool: "rec", Result: `{"got":{"x":"hello"}}`})
	second := decide().(*messages.ToolCallRequested)
	add(second)
	lg, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := lg.Append(ctx, recorded); err != nil {
		t.Fatal(err)
	}
	_ = lg.Close()

	model := &countingModel{Model: script(t, llm.ScriptStep{Content: "unused"}, llm.ScriptStep{Content: "finished"})}
	h := newHarness(t, harnessOpts{dir: dir, model: model, tools: list, deps: withChain})
	h.system.Root.Send(h.host, &actors.ResumeSession{SessionID: "s"})
	events := h.wait("s")
	assertGapFree(t, events)
	// Only the unanswered step ran, with its recorded key; the first did not run again.
	if got := rec.seen(); len(got) != 1 || got[0] != second.Key+`={"prev":"hello"}` {
		t.Fatalf("tool calls after the restart: %v (want only %s)", got, second.Key)
	}
	if model.calls[mr.Key] != 0 || model.total() != 1 {
		t.Fatalf("model calls: %v", model.calls)
	}
	var result *messages.ToolCallCompleted
	for _, e := range events {
		if e.Type == messages.TypeToolCallCompleted && e.Actor == "session" {
			result = decode[*messages.ToolCallCompleted](t, e)
		}
	}
	if result == nil || result.Tool != call.Name || result.Result != `first said {"got":{"x":"hello"}}, second said {"got":{"prev":"hello"}}` {
		t.Fatalf("the chain's result: %+v", result)
	}
	if got := decode[*messages.TaskCompleted](t, events[len(events)-1]).Output; got != "finished" {
		t.Fatalf("output %q", got)
	}
}

func TestChainCallWithBadArgumentsIsAnsweredWithoutRunningAStep(t *testing.T) {
	rec := &recorder{}
	list, withChain := chainAgent(t, rec.tool())
	model := script(t,
		calls(messages.ToolCall{ID: "c1", Name: "two_steps", Arguments: `{"y":"hello"}`}),
		llm.ScriptStep{Content: "done"})
	h := newHarness(t, harnessOpts{model: model, tools: list, deps: withChain})
	h.submit("s", "t", "go")
	events := h.wait("s")
	if got := types(events); got != "1:task.submitted 2:model.requested 3:model.responded 4:tool.requested 5:tool.completed 6:model.requested 7:model.responded 8:task.completed" {
		t.Fatalf("events: %s", got)
	}
	res := decode[*messages.ToolCallCompleted](t, events[4])
	if !strings.Contains(res.Error, "two_steps: invalid arguments") || !strings.Contains(res.Error, `"x"`) || len(rec.seen()) != 0 {
		t.Fatalf("result %+v; tool calls %v", res, rec.seen())
	}
}

// callToolAgent returns the tools of a session under the search disclosure, whose
// agent has rec and the chain twoSteps, and a deps option that gives its agent the
// disclosure and the chain.
func callToolAgent(t *testing.T, rec tools.Tool) ([]tools.Tool, func(*actors.SessionDeps)) {
	t.Helper()
	list, withChain := chainAgent(t, rec)
	d, err := disclosure.New(disclosure.Search, list)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tools(), func(deps *actors.SessionDeps) {
		withChain(deps)
		deps.Agent.Disclosure = d
	}
}

// A chain called through call_tool runs as a direct call of it does: each step an
// effect of its own, recorded, and the chain's result is call_tool's.
func TestChainCalledThroughCallToolIsRunStepByStep(t *testing.T) {
	rec := &recorder{}
	list, withChain := callToolAgent(t, rec.tool())
	model := &lastRequest{Model: script(t,
		calls(messages.ToolCall{ID: "c1", Name: actors.ToolCallTool, Arguments: `{"name":"two_steps","arguments":{"x":"hello"}}`}),
		calls(messages.ToolCall{ID: "c2", Name: actors.ToolCallTool, Arguments: `{"name":"two_steps","arguments":"{\"x\":\"fail\"}"}`}),
		calls(messages.ToolCall{ID: "c3", Name: actors.ToolCallTool, Arguments: `{"name":"two_steps","arguments":{"y":1}}`}),
		llm.ScriptStep{Content: "done"})}
	h := newHarness(t, harnessOpts{model: model, tools: list, deps: withChain})
	h.submit("s", "t", "go")
	events := h.wait("s")
	assertGapFree(t, events)

	want := "1:task.submitted 2:model.requested 3:model.responded 4:tool.requested 5:tool.requested 6:tool.completed 7:tool.requested 8:tool.completed 9:tool.completed " +
		"10:model.requested 11:model.responded 12:tool.requested 13:tool.requested 14:tool.completed 15:tool.completed " +
		"16:model.requested 17:model.responded 18:tool.requested 19:tool.completed " +
		"20:model.requested 21:model.responded 22:task.completed"
	if got := types(events); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	chainCall := decode[*messages.ToolCallRequested](t, events[3])
	first := decode[*messages.ToolCallRequested](t, events[4])
	second := decode[*messages.ToolCallRequested](t, events[6])
	if chainCall.Tool != actors.ToolCallTool ||
		first.Chain != chainCall.Key || first.ChainStep != "first" || first.Key != "s/5" || first.Tool != "rec" || first.Arguments != `{"x":"hello"}` ||
		second.Chain != chainCall.Key || second.ChainStep != "second" || second.Key != "s/7" || second.Arguments != `{"prev":"hello"}` {
		t.Fatalf("steps: %+v, %+v (chain call %+v)", first, second, chainCall)
	}
	// call_tool itself never ran: only the steps' tool did, once each.
	if got := rec.seen(); len(got) != 3 || got[0] != `s/5={"x":"hello"}` || got[1] != `s/7={"prev":"hello"}` || got[2] != `s/13={"x":"fail"}` {
		t.Fatalf("tool calls: %v", got)
	}
	wantResult := `first said {"got":{"x":"hello"}}, second said {"got":{"prev":"hello"}}`
	result := decode[*messages.ToolCallCompleted](t, events[8])
	if result.Key != chainCall.Key || result.Tool != actors.ToolCallTool || result.Result != wantResult || events[8].Actor != "session" {
		t.Fatalf("the chain's result: %+v by %s", result, events[8].Actor)
	}
	failed := decode[*messages.ToolCallCompleted](t, events[14])
	if !strings.Contains(failed.Error, `stopped at step 1 of 2, "first" (rec): asked to fail`) {
		t.Fatalf("the failed chain's result: %+v", failed)
	}
	// Arguments the chain refuses are answered without running a step.
	bad := decode[*messages.ToolCallCompleted](t, events[18])
	if !strings.Contains(bad.Error, "two_steps: invalid arguments") || events[18].Actor != "session" {
		t.Fatalf("the chain's answer to bad arguments: %+v by %s", bad, events[18].Actor)
	}
	var toolMsgs []string
	model.mu.Lock()
	for _, m := range model.msgs {
		if m.Role == messages.RoleTool {
			toolMsgs = append(toolMsgs, m.Name+": "+m.Content)
		}
	}
	model.mu.Unlock()
	if len(toolMsgs) != 3 || toolMsgs[0] != "call_tool: "+wantResult || !strings.HasPrefix(toolMsgs[1], "call_tool: error: chain two_steps stopped at step 1") {
		t.Fatalf("tool messages the model read: %q", toolMsgs)
	}
	deps := actors.SessionDeps{Agent: actors.Agent{Model: model.Name(), SystemPrompt: "test", Tools: mustRegistry(t, list).Specs()}}
	withChain(&deps)
	if div, err := actors.Verify(deps.Agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}

// call_tool naming a tool that is not a chain, or with arguments it cannot read, is
// performed as call_tool: the disclosure answers it.
func TestCallToolOfAToolThatIsNoChainIsPerformed(t *testing.T) {
	rec := &recorder{}
	list, withChain := callToolAgent(t, rec.tool())
	model := script(t,
		calls(messages.ToolCall{ID: "c1", Name: actors.ToolCallTool, Arguments: `{"name":"rec","arguments":{"x":"direct"}}`}),
		calls(messages.ToolCall{ID: "c2", Name: actors.ToolCallTool, Arguments: `{"name":"two_steps","args":{"x":"hello"}}`}),
		llm.ScriptStep{Content: "done"})
	h := newHarness(t, harnessOpts{model: model, tools: list, deps: withChain})
	h.submit("s", "t", "go")
	events := h.wait("s")
	if got := types(events); got != "1:task.submitted 2:model.requested 3:model.responded 4:tool.requested 5:tool.completed "+
		"6:model.requested 7:model.responded 8:tool.requested 9:tool.completed 10:model.requested 11:model.responded 12:task.completed" {
		t.Fatalf("events: %s", got)
	}
	if got := rec.seen(); len(got) != 1 || got[0] != `s/4={"x":"direct"}` {
		t.Fatalf("tool calls: %v", got)
	}
	if r := decode[*messages.ToolCallCompleted](t, events[8]); !strings.Contains(r.Error, "call_tool: invalid arguments") || events[8].Actor == "session" {
		t.Fatalf("call_tool with a field it does not know: %+v by %s", r, events[8].Actor)
	}
}

func TestChainCalledThroughCallToolResumesAfterARestart(t *testing.T) {
	rec := &recorder{}
	list, withChain := callToolAgent(t, rec.tool())
	resumeMidChain(t, rec, list, withChain, messages.ToolCall{ID: "c1", Name: actors.ToolCallTool, Arguments: `{"name":"two_steps","arguments":{"x":"hello"}}`})
}

// A step may call a catalog tool (an MCP server's). When the catalog no longer has
// it, the step not yet requested ends the chain with an error naming it, and a step
// requested before the tool left (a session resumed without it) is answered by the
// session rather than waited on forever.
func TestChainStepOfACatalogToolThatLeft(t *testing.T) {
	rec := &recorder{}
	remote := funcTool{"srv__rec", rec.tool().Call}
	cat := &catalog{}
	cat.set(remote)
	ch := tools.Chain{Name: "remote", Description: "Records x, twice, on a server.", Steps: []tools.ChainStep{
		{Name: "first", Tool: "srv__rec", Args: `{"x":1}`},
		{Name: "second", Tool: "srv__rec", Args: `{"x":2}`},
	}}
	cts, err := tools.NewChainTools([]tools.Chain{ch}, nil, tools.WithStepCatalog(ownAll{cat}))
	if err != nil {
		t.Fatal(err)
	}
	agent := actors.Agent{Model: "m", Tools: []messages.ToolSpec{cts[0].Spec()}, Catalog: cat, Chains: map[string]*tools.ChainTool{"remote": cts[0]}}
	st := actors.NewSessionState("s")
	apply := func(p messages.Payload) {
		t.Helper()
		if err := st.Apply(env(t, p, "s", st.LastSeq+1, "t")); err != nil {
			t.Fatal(err)
		}
	}
	decide := func() messages.Payload {
		t.Helper()
		d := st.Decide(agent, st.LastSeq+1, 0)
		if d == nil {
			t.Fatal("the agent decided nothing")
		}
		return d.Payload
	}
	apply(&messages.TaskSubmitted{Input: "go"})
	mr := decide().(*messages.ModelRequested)
	apply(mr)
	apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: "remote", Arguments: `{}`}}}})
	apply(decide()) // the chain's call
	first := decide().(*messages.ToolCallRequested)
	if first.Tool != "srv__rec" || first.ChainStep != "first" {
		t.Fatalf("first step: %+v", first)
	}
	apply(first)
	if d := st.Decide(agent, st.LastSeq+1, 0); d != nil {
		t.Fatalf("decided %+v while the step runs", d.Payload)
	}
	// The server went away with the step in flight, and the session resumed.
	cat.set()
	answer, ok := decide().(*messages.ToolCallCompleted)
	if !ok || answer.Key != first.Key || !strings.Contains(answer.Error, `unknown tool "srv__rec"`) {
		t.Fatalf("the step's answer: %+v", answer)
	}
	apply(answer)
	end, ok := decide().(*messages.ToolCallCompleted)
	if !ok || end.Tool != "remote" || !strings.Contains(end.Error, `chain remote stopped at step 1 of 2, "first" (srv__rec): unknown tool`) {
		t.Fatalf("the chain's answer: %+v", end)
	}

	// A step not yet requested whose tool is gone ends the chain without a request.
	st = actors.NewSessionState("s")
	cat.set(remote)
	apply(&messages.TaskSubmitted{Input: "go"})
	mr = decide().(*messages.ModelRequested)
	apply(mr)
	apply(&messages.ModelResponded{Key: mr.Key, Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "c1", Name: "remote", Arguments: `{}`}}}})
	apply(decide())
	first = decide().(*messages.ToolCallRequested)
	apply(first)
	apply(&messages.ToolCallCompleted{Key: first.Key, CallID: "c1", Tool: "srv__rec", Result: "ok"})
	cat.set()
	end, ok = decide().(*messages.ToolCallCompleted)
	if !ok || !strings.Contains(end.Error, `stopped at step 2 of 2, "second" (srv__rec): unknown tool "srv__rec"`) {
		t.Fatalf("the chain's answer: %+v", end)
	}
}

// ownAll owns every name: a tools.ChainCatalog of a test catalog.
type ownAll struct{ *catalog }

func (ownAll) Owns(string) bool { return true }

// A chain call's result records its latency on the session's clock: from its first
// step's request to its result, as an effect's result records its call's. The
// steps here move a test clock 3 ms each, so the chain took 6 ms on it. Replay
// re-decides the same latency from the recorded times, and a result recorded
// before chains carried one (0) still verifies.
func TestChainResultRecordsItsLatencyOnTheSessionClock(t *testing.T) {
	clock := &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	slow := funcTool{"rec", func(_ context.Context, c tools.Call) (string, error) {
		clock.advance(3 * time.Millisecond)
		return fmt.Sprintf(`{"got":%s}`, c.Arguments), nil
	}}
	list, withChain := chainAgent(t, slow)
	model := script(t, calls(messages.ToolCall{ID: "c1", Name: "two_steps", Arguments: `{"x":"hello"}`}), llm.ScriptStep{Content: "done"})
	h := newHarness(t, harnessOpts{model: model, tools: list, deps: func(d *actors.SessionDeps) {
		withChain(d)
		d.Clock = clock
	}})
	h.submit("s", "t", "go")
	events := h.wait("s")
	result := decode[*messages.ToolCallCompleted](t, events[8])
	if result.Tool != "two_steps" || result.LatencyUS != 6000 {
		t.Fatalf("the chain's result: %+v, want latency_us 6000 (two steps of 3 ms on the session's clock)", result)
	}
	agent := actors.Agent{Model: model.Name(), SystemPrompt: "test", Tools: mustRegistry(t, list).Specs()}
	withAgent := actors.SessionDeps{Agent: agent}
	withChain(&withAgent)
	if div, err := actors.Verify(withAgent.Agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
	old := &messages.ToolCallCompleted{Key: result.Key, CallID: result.CallID, Tool: result.Tool, Result: result.Result}
	env, err := messages.NewEnvelope(old)
	if err != nil {
		t.Fatal(err)
	}
	env.ID, env.SessionID, env.Seq, env.TS, env.CausationID, env.CorrelationID, env.Actor = events[8].ID, events[8].SessionID, events[8].Seq,
		events[8].TS, events[8].CausationID, events[8].CorrelationID, events[8].Actor
	recorded := append(append(append([]messages.Envelope(nil), events[:8]...), env), events[9:]...)
	if div, err := actors.Verify(withAgent.Agent, recorded); err != nil || div != nil {
		t.Fatalf("verify of a chain result recorded without its latency: %v %v", div, err)
	}
}
