package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// submitTask submits p as task id of session.
func (h *harness) submitTask(session, id string, p *messages.TaskSubmitted) {
	h.t.Helper()
	e, err := messages.NewEnvelope(p)
	if err != nil {
		h.t.Fatal(err)
	}
	e.ID, e.SessionID, e.Actor = id, session, "test"
	res, err := h.system.Root.RequestFuture(h.host, &actors.SubmitTask{Envelope: e}, 10*time.Second).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	if _, ok := res.(*actors.TaskAccepted); !ok {
		h.t.Fatalf("submit: %v", res)
	}
}

// failure returns the TaskFailed that ends events, failing the test for another end.
func failure(t *testing.T, events []messages.Envelope) *messages.TaskFailed {
	t.Helper()
	last := events[len(events)-1]
	if last.Type != messages.TypeTaskFailed {
		t.Fatalf("the task ended with %s, want task.failed: %s", last.Type, types(events))
	}
	return decode[*messages.TaskFailed](t, last)
}

func count(events []messages.Envelope, typ messages.Type) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// verifyDeterministic re-decides a recorded session with agent: a stopped task must
// stop at the same event in replay.
func verifyDeterministic(t *testing.T, agent actors.Agent, events []messages.Envelope) {
	t.Helper()
	div, err := actors.Verify(agent, events)
	if err != nil || div != nil {
		t.Fatalf("replay verify: %v %v", div, err)
	}
}

func TestTokenBudgetStopsATask(t *testing.T) {
	used := messages.Usage{PromptTokens: 80, CompletionTokens: 20}
	echo := funcTool{"echo", func(_ context.Context, c tools.Call) (string, error) { return c.Arguments, nil }}
	step := func(n int) llm.ScriptStep {
		return llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: fmt.Sprint(n), Name: "echo", Arguments: fmt.Sprintf(`{"n":%d}`, n)}}, Usage: used}
	}
	withBudget := func(n int) func(*actors.SessionDeps) {
		return func(d *actors.SessionDeps) { d.Agent.MaxTokens = n }
	}

	t.Run("the agent's budget", func(t *testing.T) {
		// 100 tokens a call: the second reply reaches 150, and its call is not made.
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, step(1), step(2), step(3)), deps: withBudget(150)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		f := failure(t, events)
		if f.Reason != messages.ReasonTokenBudget || f.Steps != 2 || f.Usage.PromptTokens != 160 || f.Usage.CompletionTokens != 40 {
			t.Fatalf("failure: %+v", f)
		}
		if want := "used 200 tokens (160 prompt + 40 completion) without a final answer; its budget is 150"; !strings.Contains(f.Error, want) {
			t.Errorf("error %q does not say %q", f.Error, want)
		}
		if n := count(events, messages.TypeToolCallRequested); n != 1 {
			t.Errorf("%d tool calls requested, want 1 (none after the budget was reached): %s", n, types(events))
		}
		agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{echo.Spec()}, MaxTokens: 150}
		verifyDeterministic(t, agent, events)
		// The result carries the reason.
		st := actors.NewSessionState("s")
		for _, e := range events {
			if err := st.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		if st.TaskReason("t") != messages.ReasonTokenBudget || st.StatusReason() != messages.ReasonTokenBudget {
			t.Errorf("folded reasons: %q %q", st.TaskReason("t"), st.StatusReason())
		}
	})

	t.Run("the task's budget before the agent's", func(t *testing.T) {
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, step(1), step(2), step(3)), deps: withBudget(10_000)})
		h.submitTask("s", "t", &messages.TaskSubmitted{Input: "go", MaxTokens: 100})
		f := failure(t, h.wait("s"))
		if f.Reason != messages.ReasonTokenBudget || f.Steps != 1 || !strings.Contains(f.Error, "its budget is 100") {
			t.Fatalf("failure: %+v", f)
		}
	})

	t.Run("a final answer that crosses the budget is kept", func(t *testing.T) {
		answer := llm.ScriptStep{Content: "done", Usage: used}
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, step(1), answer), deps: withBudget(150)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		done := decode[*messages.TaskCompleted](t, events[len(events)-1])
		if done.Output != "done" || done.Usage.PromptTokens+done.Usage.CompletionTokens != 200 {
			t.Fatalf("completed: %+v", done)
		}
	})
}

func TestLoopDetectedByRepetition(t *testing.T) {
	calc := funcTool{"calculator", func(context.Context, tools.Call) (string, error) { return "2", nil }}
	// The same call three times: the second spelled otherwise (spaces, key order of
	// the same JSON object), which is still the same call.
	model := script(t,
		calls(messages.ToolCall{ID: "1", Name: "calculator", Arguments: `{"expression":"1+1","precise":true}`}),
		calls(messages.ToolCall{ID: "2", Name: "calculator", Arguments: `{ "precise": true, "expression": "1+1" }`}),
		calls(messages.ToolCall{ID: "3", Name: "calculator", Arguments: `{"expression":"1+1","precise":true}`}),
		llm.ScriptStep{Content: "2"})
	h := newHarness(t, harnessOpts{tools: []tools.Tool{calc}, model: model})
	h.submit("s", "t", "go")
	events := h.wait("s")
	f := failure(t, events)
	want := `stopped: the same call calculator({"expression":"1+1","precise":true}) was requested 3 times`
	if f.Reason != messages.ReasonLoop || f.Error != want || f.Steps != 3 {
		t.Fatalf("failure: %+v, want %q", f, want)
	}
	if n := count(events, messages.TypeToolCallRequested); n != 2 {
		t.Errorf("%d tool calls requested, want 2 (the third request is not performed)", n)
	}
	verifyDeterministic(t, actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{calc.Spec()}}, events)
}

func TestLoopDetectedByStaleResults(t *testing.T) {
	// Other arguments at each step, and always the same result: the first step
	// brings it, the next four bring nothing new.
	same := funcTool{"lookup", func(context.Context, tools.Call) (string, error) { return "no results", nil }}
	var steps []llm.ScriptStep
	for i := range 8 {
		steps = append(steps, calls(messages.ToolCall{ID: fmt.Sprint(i), Name: "lookup", Arguments: fmt.Sprintf(`{"q":"try %d"}`, i)}))
	}
	h := newHarness(t, harnessOpts{tools: []tools.Tool{same}, model: script(t, steps...)})
	h.submit("s", "t", "go")
	events := h.wait("s")
	f := failure(t, events)
	if f.Reason != messages.ReasonLoop || f.Steps != 5 || !strings.Contains(f.Error, "4 steps in a row brought no new information") {
		t.Fatalf("failure: %+v", f)
	}
	verifyDeterministic(t, actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{same.Spec()}}, events)

	// A new result resets the count.
	var n atomic.Int32
	varied := funcTool{"lookup", func(context.Context, tools.Call) (string, error) {
		if n.Add(1) == 3 {
			return "a result at last", nil
		}
		return "no results", nil
	}}
	h = newHarness(t, harnessOpts{tools: []tools.Tool{varied}, model: script(t, steps...)})
	h.submit("s", "t", "go")
	f = failure(t, h.wait("s"))
	if f.Reason != messages.ReasonLoop || f.Steps != 7 {
		t.Fatalf("with a new result at step 3: %+v, want loop_detected after 7 steps", f)
	}
}

func TestLoopDetectionDisabled(t *testing.T) {
	calc := funcTool{"calculator", func(context.Context, tools.Call) (string, error) { return "2", nil }}
	var steps []llm.ScriptStep
	for i := range 6 {
		steps = append(steps, calls(messages.ToolCall{ID: fmt.Sprint(i), Name: "calculator", Arguments: `{"expression":"1+1"}`}))
	}
	steps = append(steps, llm.ScriptStep{Content: "2"})
	off := func(d *actors.SessionDeps) {
		d.Agent.LoopRepeats, d.Agent.LoopStaleSteps = actors.LoopOff, actors.LoopOff
	}
	h := newHarness(t, harnessOpts{tools: []tools.Tool{calc}, model: script(t, steps...), deps: off})
	h.submit("s", "t", "go")
	events := h.wait("s")
	if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
		t.Fatalf("with loop detection off the task ended with %s", last.Type)
	}
	if n := count(events, messages.TypeToolCallRequested); n != 6 {
		t.Errorf("%d tool calls, want 6", n)
	}

	// Higher limits than the defaults let the same script run further.
	more := func(d *actors.SessionDeps) { d.Agent.LoopRepeats, d.Agent.LoopStaleSteps = 5, 10 }
	h = newHarness(t, harnessOpts{tools: []tools.Tool{calc}, model: script(t, steps...), deps: more})
	h.submit("s", "t", "go")
	f := failure(t, h.wait("s"))
	if f.Reason != messages.ReasonLoop || f.Steps != 5 || !strings.Contains(f.Error, "requested 5 times") {
		t.Fatalf("loop_repeats 5: %+v", f)
	}
}

// requests records every model request.
type requests struct {
	llm.Model
	mu  sync.Mutex
	all []llm.Request
}

func (m *requests) Generate(ctx context.Context, r llm.Request) (llm.Response, error) {
	m.mu.Lock()
	m.all = append(m.all, r)
	m.mu.Unlock()
	return m.Model.Generate(ctx, r)
}

func TestSimpleParadigmAnswersWithOneCallAndNoTools(t *testing.T) {
	calc := funcTool{"calculator", func(context.Context, tools.Call) (string, error) { return "2", nil }}
	simple := func(d *actors.SessionDeps) { d.Agent.SingleCall = true }
	for _, c := range []struct {
		name  string
		reply llm.ScriptStep
		want  string // the answer; "" for a failure
	}{
		{"text", llm.ScriptStep{Content: "Paris."}, "Paris."},
		{"text and tool calls", llm.ScriptStep{Content: "It is 2.", ToolCalls: []messages.ToolCall{{ID: "1", Name: "calculator", Arguments: `{}`}}}, "It is 2."},
		{"tool calls only", calls(messages.ToolCall{ID: "1", Name: "calculator", Arguments: `{}`}), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := &requests{Model: script(t, c.reply, llm.ScriptStep{Content: "a second call"})}
			h := newHarness(t, harnessOpts{tools: []tools.Tool{calc}, model: model, deps: simple})
			h.submit("s", "t", "capital of France?")
			events := h.wait("s")
			if len(model.all) != 1 || len(model.all[0].Tools) != 0 {
				t.Fatalf("%d model requests, the first offering %d tools: want one, offering none", len(model.all), len(model.all[0].Tools))
			}
			if n := count(events, messages.TypeToolCallRequested); n != 0 {
				t.Errorf("%d tool calls requested", n)
			}
			if req := decode[*messages.ModelRequested](t, events[1]); len(req.Tools) != 0 {
				t.Errorf("model.requested records tools %v", req.Tools)
			}
			agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{calc.Spec()}, SingleCall: true}
			verifyDeterministic(t, agent, events)
			if c.want == "" {
				f := failure(t, events)
				if f.Reason != messages.ReasonModelError || !strings.Contains(f.Error, "tool calls (calculator) and no text") {
					t.Fatalf("failure: %+v", f)
				}
				return
			}
			done := decode[*messages.TaskCompleted](t, events[len(events)-1])
			if done.Output != c.want || done.Steps != 1 {
				t.Fatalf("completed: %+v, want %q in one step", done, c.want)
			}
		})
	}
}

// The budget is also judged before a model call: a session refolded under an agent
// whose budget its task has used up (a node restarted with a smaller max_tokens)
// makes no further call.
func TestTokenBudgetIsJudgedBeforeTheNextModelCall(t *testing.T) {
	agent := actors.Agent{Model: "m", Tools: []messages.ToolSpec{{Name: "x"}}}
	st := actors.NewSessionState("s")
	apply := func(seq uint64, p messages.Payload) {
		t.Helper()
		if err := st.Apply(env(t, p, "s", seq, "t")); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, &messages.TaskSubmitted{Input: "go"})
	mr := st.Decide(agent, 2, 0).Payload.(*messages.ModelRequested)
	apply(2, mr)
	apply(3, &messages.ModelResponded{Key: mr.Key, Usage: messages.Usage{PromptTokens: 40, CompletionTokens: 10},
		Message: messages.ChatMessage{Role: messages.RoleAssistant, ToolCalls: []messages.ToolCall{{ID: "a", Name: "x", Arguments: "{}"}}}})
	req := st.Decide(agent, 4, 0).Payload.(*messages.ToolCallRequested)
	apply(4, req)
	apply(5, &messages.ToolCallCompleted{Key: req.Key, CallID: "a", Tool: "x", Result: "ok"})
	if _, ok := st.Decide(agent, 6, 0).Payload.(*messages.ModelRequested); !ok {
		t.Fatal("without a budget the next step is a model call")
	}
	agent.MaxTokens = 50
	f, ok := st.Decide(agent, 6, 0).Payload.(*messages.TaskFailed)
	if !ok || f.Reason != messages.ReasonTokenBudget || f.Steps != 1 || f.Usage.PromptTokens != 40 {
		t.Fatalf("with a budget of 50 after 50 tokens: %+v", st.Decide(agent, 6, 0).Payload)
	}
	if again := st.Decide(agent, 6, 0).Payload.(*messages.TaskFailed); *again != *f {
		t.Errorf("Decide is not pure: %+v then %+v", f, again)
	}
}

// A tool that spends model tokens on the task's behalf (a sub-agent: it says so,
// tools.ModelSpender, and reports them with tools.ReportUsage) has them recorded on its tool.completed, and they
// count against the task's budget, once per call, but not in the task's own usage:
// the task stops before a model call its sub-agents' tokens put over the budget,
// and says how many were theirs. Replay re-decides it from the recorded events.
func TestSubAgentTokensCountAgainstTheBudget(t *testing.T) {
	own := messages.Usage{PromptTokens: 20, CompletionTokens: 10}
	spent := messages.Usage{PromptTokens: 70, CompletionTokens: 30, CostUSD: 0.5}
	sub := spenderTool{funcTool{"sub", func(ctx context.Context, c tools.Call) (string, error) {
		tools.ReportUsage(ctx, spent)
		return "done by a sub-agent", nil
	}}}
	step := func(n int) llm.ScriptStep {
		return llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: fmt.Sprint(n), Name: "sub", Arguments: fmt.Sprintf(`{"n":%d}`, n)}}, Usage: own}
	}
	answer := llm.ScriptStep{Content: "all done", Usage: own}
	budget := func(n int) func(*actors.SessionDeps) {
		return func(d *actors.SessionDeps) { d.Agent.MaxTokens = n }
	}

	t.Run("over the budget", func(t *testing.T) {
		// 30 + 100 (the sub-agent) = 130 after the first call: under 150, so the
		// second model call is made (160, plus 100 more from its call would be 260).
		// Its reply's call is not made: 160 reached the budget.
		h := newHarness(t, harnessOpts{tools: []tools.Tool{sub}, model: script(t, step(1), step(2), answer), deps: budget(150)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		f := failure(t, events)
		if f.Reason != messages.ReasonTokenBudget || f.Usage != (messages.Usage{PromptTokens: 40, CompletionTokens: 20}) || f.SubAgentsUsage != spent {
			t.Fatalf("failure: %+v", f)
		}
		if want := "used 160 tokens (40 prompt + 20 completion of its own, 100 by its sub-agents) without a final answer; its budget is 150"; !strings.Contains(f.Error, want) {
			t.Errorf("error %q does not say %q", f.Error, want)
		}
		completed := payloadsOf[*messages.ToolCallCompleted](t, events)
		if len(completed) != 1 || completed[0].Usage != spent {
			t.Fatalf("tool.completed: %+v", completed)
		}
		agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{sub.Spec()}, MaxTokens: 150}
		verifyDeterministic(t, agent, events)
	})

	t.Run("under the budget", func(t *testing.T) {
		h := newHarness(t, harnessOpts{tools: []tools.Tool{sub}, model: script(t, step(1), answer), deps: budget(1000)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		done := decode[*messages.TaskCompleted](t, events[len(events)-1])
		if done.Output != "all done" || done.Usage != (messages.Usage{PromptTokens: 40, CompletionTokens: 20}) || done.SubAgentsUsage != spent {
			t.Fatalf("completed: %+v", done)
		}
	})

	t.Run("a tool that spends nothing records nothing", func(t *testing.T) {
		echo := spenderTool{funcTool{"sub", func(_ context.Context, c tools.Call) (string, error) { return c.Arguments, nil }}}
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, step(1), answer), deps: budget(1000)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		for _, e := range events {
			if (e.Type == messages.TypeToolCallCompleted || e.Type == messages.TypeTaskCompleted) && strings.Contains(string(e.Payload), "usage\":{\"prompt_tokens\":0") {
				t.Errorf("%s records a zero usage: %s", e.Type, e.Payload)
			}
			if strings.Contains(string(e.Payload), "sub_agents_usage") {
				t.Errorf("%s records sub-agents' usage: %s", e.Type, e.Payload)
			}
		}
	})
}

// The fold counts a call's sub-agent usage once, even when its tool.completed is
// folded twice (a log with a repeated answer).
func TestSubAgentUsageCountsOncePerCall(t *testing.T) {
	st := actors.NewSessionState("s")
	spent := messages.Usage{PromptTokens: 7, CompletionTokens: 3}
	add := func(seq uint64, p messages.Payload, id string) {
		t.Helper()
		e, err := messages.NewEnvelope(p)
		if err != nil {
			t.Fatal(err)
		}
		e.ID, e.SessionID, e.Seq, e.CorrelationID = id, "s", seq, "t"
		if err := st.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	add(1, &messages.TaskSubmitted{Input: "go"}, "t")
	add(2, &messages.ModelRequested{Key: "s/2", Step: 1}, "s/2")
	add(3, &messages.ModelResponded{Key: "s/2", Message: messages.ChatMessage{Role: messages.RoleAssistant,
		ToolCalls: []messages.ToolCall{{ID: "1", Name: "sub", Arguments: "{}"}}}}, "s/3")
	add(4, &messages.ToolCallRequested{Key: "s/4", CallID: "1", Tool: "sub", Arguments: "{}"}, "s/4")
	add(5, &messages.ToolCallCompleted{Key: "s/4", CallID: "1", Tool: "sub", Result: "ok", Usage: spent}, "s/5")
	add(6, &messages.ToolCallCompleted{Key: "s/4", CallID: "1", Tool: "sub", Result: "ok", Usage: spent}, "s/6")
	if got := st.SubAgentsUsage(); got != spent {
		t.Fatalf("sub-agents' usage %+v, want %+v", got, spent)
	}
}

// payloadsOf decodes the events of one payload type.
func payloadsOf[P messages.Payload](t *testing.T, events []messages.Envelope) []P {
	t.Helper()
	var out []P
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := p.(P); ok {
			out = append(out, v)
		}
	}
	return out
}

// spenderTool is a funcTool whose calls report model usage (tools.ModelSpender).
type spenderTool struct{ funcTool }

func (spenderTool) SpendsModelTokens() bool { return true }

// A task's cost budget (the gateway's prices, as its model calls' usage records
// them) stops it as its token budget does: before the model call after its cost,
// with its sub-agents' cost, reached the budget; the task's own budget before its
// agent's. Replay re-decides it.
func TestCostBudgetStopsATask(t *testing.T) {
	echo := funcTool{"echo", func(_ context.Context, c tools.Call) (string, error) { return c.Arguments, nil }}
	step := func(n int) llm.ScriptStep {
		return llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: fmt.Sprint(n), Name: "echo", Arguments: fmt.Sprintf(`{"n":%d}`, n)}},
			Usage: messages.Usage{PromptTokens: 10, CompletionTokens: 5, CostUSD: 0.25}}
	}
	withBudget := func(usd float64) func(*actors.SessionDeps) {
		return func(d *actors.SessionDeps) { d.Agent.MaxCostUSD = usd }
	}

	t.Run("the agent's budget", func(t *testing.T) {
		// $0.25 a call: the second reply reaches $0.50, and its call is not made.
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, step(1), step(2), step(3)), deps: withBudget(0.5)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		f := failure(t, events)
		if f.Reason != messages.ReasonCostBudget || f.Steps != 2 || f.Usage.CostUSD != 0.5 {
			t.Fatalf("failure: %+v", f)
		}
		if want := "stopped: the task cost $0.5000 without a final answer; its budget is $0.5000"; f.Error != want {
			t.Errorf("error %q, want %q", f.Error, want)
		}
		if n := count(events, messages.TypeToolCallRequested); n != 1 {
			t.Errorf("%d tool calls requested, want 1: %s", n, types(events))
		}
		agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{echo.Spec()}, MaxCostUSD: 0.5}
		verifyDeterministic(t, agent, events)
	})

	t.Run("the task's budget before the agent's", func(t *testing.T) {
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, step(1), step(2), step(3)), deps: withBudget(100)})
		h.submitTask("s", "t", &messages.TaskSubmitted{Input: "go", MaxCostUSD: 0.2})
		f := failure(t, h.wait("s"))
		if f.Reason != messages.ReasonCostBudget || f.Steps != 1 || !strings.Contains(f.Error, "its budget is $0.2000") {
			t.Fatalf("failure: %+v", f)
		}
	})

	t.Run("sub-agents' cost counts", func(t *testing.T) {
		sub := spenderTool{funcTool{"echo", func(ctx context.Context, c tools.Call) (string, error) {
			tools.ReportUsage(ctx, messages.Usage{PromptTokens: 1, CostUSD: 0.5})
			return "ok", nil
		}}}
		h := newHarness(t, harnessOpts{tools: []tools.Tool{sub}, model: script(t, step(1), step(2), step(3)), deps: withBudget(1)})
		h.submit("s", "t", "go")
		f := failure(t, h.wait("s"))
		// $0.25 + $0.50 after the first call; the second reply makes $1.00.
		if f.Reason != messages.ReasonCostBudget || f.Steps != 2 || f.SubAgentsUsage.CostUSD != 0.5 ||
			!strings.Contains(f.Error, "the task cost $1.0000 ($0.5000 of its own, $0.5000 by its sub-agents)") {
			t.Fatalf("failure: %+v", f)
		}
	})

	t.Run("no price, no stop", func(t *testing.T) {
		free := llm.ScriptStep{ToolCalls: step(1).ToolCalls, Usage: messages.Usage{PromptTokens: 10}}
		h := newHarness(t, harnessOpts{tools: []tools.Tool{echo}, model: script(t, free, llm.ScriptStep{Content: "done"}), deps: withBudget(0.01)})
		h.submit("s", "t", "go")
		events := h.wait("s")
		if last := events[len(events)-1]; last.Type != messages.TypeTaskCompleted {
			t.Fatalf("ended with %s", last.Type)
		}
	})
}
