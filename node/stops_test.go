package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/llm/gateway"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
)

// stopsConfig is a node whose model asks for the same calculation at every step,
// at 100 tokens a call, with an agent that has a token budget and one of the simple
// paradigm.
func stopsConfig(t *testing.T) (node.Config, *agentRequests) {
	t.Helper()
	step := llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c", Name: "calculator", Arguments: `{"expression":"1+1"}`}},
		Content: "Let me compute.", Usage: messages.Usage{PromptTokens: 90, CompletionTokens: 10}}
	script, err := llm.NewScripted(llm.Script{Name: "scripted", Steps: []llm.ScriptStep{step, step, step, step, step}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &agentRequests{Model: script}
	return node.Config{Model: rec, Agents: []node.NamedAgent{
		{Name: "frugal", MaxTokens: 150},
		{Name: "oneshot", Paradigm: node.ParadigmSimple, SystemPrompt: "Answer at once."},
		{Name: "patient", LoopRepeats: actors.LoopOff, LoopStaleSteps: actors.LoopOff, MaxSteps: 4},
	}}, rec
}

// Each stop condition ends the task with its reason in its TaskFailed event, in the
// session's status (GET /v1/sessions/{id}), in its troupe.results message and in
// RunTask's result (MCP's run_task).
func TestStopReasonsReachTheResults(t *testing.T) {
	cfg, rec := stopsConfig(t)
	n := nodetest.Start(t, cfg)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	results, err := n.Bus().Subscribe(ctx, messages.TopicResults)
	if err != nil {
		t.Fatal(err)
	}
	published := func(session string) messages.TaskResult {
		t.Helper()
		for {
			select {
			case m := <-results:
				m.Ack()
				var r messages.TaskResult
				if err := json.Unmarshal(m.Payload, &r); err != nil {
					t.Fatal(err)
				}
				if r.SessionID == session {
					return r
				}
			case <-ctx.Done():
				t.Fatalf("no result of %s on %s", session, messages.TopicResults)
			}
		}
	}
	for _, c := range []struct {
		name, body, reason, error string
		steps                     int
	}{
		{"loop", `{"input":"1+1?","session_id":"loop"}`, messages.ReasonLoop,
			`stopped: the same call calculator({"expression":"1+1"}) was requested 3 times`, 3},
		{"the task's budget", `{"input":"1+1?","session_id":"budget","max_tokens":250}`, messages.ReasonTokenBudget,
			"stopped: the task used 300 tokens (270 prompt + 30 completion) without a final answer; its budget is 250", 3},
		{"the agent's budget", `{"input":"1+1?","session_id":"frugal","agent":"frugal"}`, messages.ReasonTokenBudget, "its budget is 150", 2},
		{"max steps with loop detection off", `{"input":"1+1?","session_id":"patient","agent":"patient"}`, messages.ReasonMaxSteps,
			"stopped after 4 model calls", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.take()
			if code, out := post(t, srv.URL+"/v1/tasks", c.body); code != http.StatusAccepted {
				t.Fatalf("POST: %d %v", code, out)
			}
			var session struct {
				SessionID string `json:"session_id"`
			}
			_ = json.Unmarshal([]byte(c.body), &session)
			r := waitDone(t, srv.URL, session.SessionID)
			if r.Status != messages.StatusFailed || r.Reason != c.reason || !strings.Contains(r.Error, c.error) {
				t.Errorf("GET status: %+v, want reason %s and %q", r, c.reason, c.error)
			}
			if p := published(session.SessionID); p != r {
				t.Errorf("%s: %+v, want %+v", messages.TopicResults, p, r)
			}
			events, err := n.Log().Read(context.Background(), session.SessionID, 1)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := events[len(events)-1].Decode()
			if f, ok := p.(*messages.TaskFailed); !ok || f.Reason != c.reason || f.Steps != c.steps || f.Error != r.Error {
				t.Errorf("the last event: %+v, want task.failed with reason %s after %d steps", p, c.reason, c.steps)
			}
			if got := len(rec.take()); got != c.steps {
				t.Errorf("%d model calls, want %d", got, c.steps)
			}
		})
	}

	res, err := n.RunTask(ctx, node.Task{Input: "1+1?", SessionID: "run-task", MaxTokens: 100})
	if err != nil || res.Status != messages.StatusFailed || res.Reason != messages.ReasonTokenBudget {
		t.Errorf("RunTask: %+v %v, want failed with reason %s", res, err, messages.ReasonTokenBudget)
	}
}

// The simple paradigm is one model call, offered no tools: its reply's text is the
// answer even when the model asks for tools anyway.
func TestSimpleAgentAnswersWithOneCall(t *testing.T) {
	cfg, rec := stopsConfig(t)
	n := nodetest.Start(t, cfg)
	events := runAgentTask(t, n, node.Task{Input: "1+1?", SessionID: "simple", Agent: "oneshot"})
	reqs := rec.take()
	if len(reqs) != 1 || len(reqs[0].Tools) != 0 || reqs[0].Messages[0].Content != "Answer at once." {
		t.Fatalf("%d requests: %+v, want one with no tools", len(reqs), reqs)
	}
	p, _ := events[len(events)-1].Decode()
	if done, ok := p.(*messages.TaskCompleted); !ok || done.Output != "Let me compute." || done.Steps != 1 {
		t.Fatalf("the task ended with %+v", p)
	}
	all, err := cfg.AllAgents()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.VerifyAmong(all, events); err != nil || div != nil {
		t.Errorf("verify: %v %v", div, err)
	}
}

// max_tokens enters with a task from every source and is bounded.
func TestMaxTokensIngress(t *testing.T) {
	cfg, _ := stopsConfig(t)
	n := nodetest.Start(t, cfg)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	for name, body := range map[string]string{
		"negative":  `{"input":"x","max_tokens":-1}`,
		"too large": `{"input":"x","max_tokens":100000001}`,
		"a string":  `{"input":"x","max_tokens":"lots"}`,
	} {
		if code, out := post(t, srv.URL+"/v1/tasks", body); code != http.StatusBadRequest || !strings.Contains(out["error"], "max_tokens") {
			t.Errorf("%s: %d %v", name, code, out)
		}
	}
	submitted := func(session string) *messages.TaskSubmitted {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			events, err := n.Log().Read(context.Background(), session, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) > 0 {
				p, err := events[0].Decode()
				if err != nil {
					t.Fatal(err)
				}
				return p.(*messages.TaskSubmitted)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("session %s was not recorded", session)
		return nil
	}
	if code, out := post(t, srv.URL+"/v1/tasks", `{"input":"x","session_id":"http","max_tokens":1234}`); code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	if p := submitted("http"); p.MaxTokens != 1234 {
		t.Errorf("HTTP task recorded max_tokens %d", p.MaxTokens)
	}
	// A plain JSON task on the tasks topic, as any Kafka client publishes it.
	if err := n.Bus().Publish(messages.TopicTasks, message.NewMessage("plain-1", []byte(`{"input":"x","session_id":"plain","max_tokens":77}`))); err != nil {
		t.Fatal(err)
	}
	if p := submitted("plain"); p.MaxTokens != 77 {
		t.Errorf("plain JSON task recorded max_tokens %d", p.MaxTokens)
	}
	if _, err := n.Submit(context.Background(), node.Task{Input: "x", MaxTokens: -3}); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Errorf("Submit with max_tokens -3: %v", err)
	}
}

func TestNamedAgentStopSettingsAreValidated(t *testing.T) {
	for _, c := range []struct {
		agent node.NamedAgent
		want  string
	}{
		{node.NamedAgent{Name: "a", MaxTokens: -1}, "max_tokens"},
		{node.NamedAgent{Name: "a", MaxTokens: node.MaxTokenBudget + 1}, "max_tokens"},
		{node.NamedAgent{Name: "a", LoopRepeats: 1}, "loop_repeats"},
		{node.NamedAgent{Name: "a", LoopRepeats: -2}, "loop_repeats"},
		{node.NamedAgent{Name: "a", LoopStaleSteps: 1001}, "loop_stale_steps"},
	} {
		_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Agents: []node.NamedAgent{c.agent}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("agent %+v: %v, want %q", c.agent, err, c.want)
		}
	}
}

// The default agent's stop conditions come from the node's configuration, and a
// named agent without its own takes them.
func TestDefaultAgentStopConditions(t *testing.T) {
	cfg, rec := stopsConfig(t)
	cfg.MaxTokens, cfg.LoopRepeats = 350, actors.LoopOff
	n := nodetest.Start(t, cfg)
	for _, c := range []struct {
		agent string
		steps int
	}{{"", 4}, {"patient", 4}, {"frugal", 2}} { // with loop detection, the default agent's third call would stop it
		rec.take()
		events := runAgentTask(t, n, node.Task{Input: "1+1?", SessionID: "default-" + c.agent, Agent: c.agent})
		p, _ := events[len(events)-1].Decode()
		if f, ok := p.(*messages.TaskFailed); !ok || f.Reason != messages.ReasonTokenBudget || f.Steps != c.steps {
			t.Errorf("agent %q: the task ended with %+v, want token_budget after %d steps (loop detection off)", c.agent, p, c.steps)
		}
	}
	_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), LoopRepeats: 1})
	if err == nil || !strings.Contains(err.Error(), "the default agent: loop_repeats") {
		t.Errorf("a node with loop_repeats 1: %v", err)
	}
}

// A task's cost budget, by the gateway's price table, stops it with reason
// cost_budget; a cost budget out of range, or not a number, is refused with 400.
func TestCostBudgetThroughTheNode(t *testing.T) {
	cfg, rec := stopsConfig(t)
	// 100 tokens a call at $1,000 per million: $0.10 a call.
	cfg.Gateway.Prices = map[string]gateway.Price{"scripted": {Prompt: 1000, Completion: 1000}}
	n := nodetest.Start(t, cfg)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	if code, out := post(t, srv.URL+"/v1/tasks", `{"input":"1+1?","session_id":"costly","max_cost_usd":0.25}`); code != http.StatusAccepted {
		t.Fatalf("POST: %d %v", code, out)
	}
	r := waitDone(t, srv.URL, "costly")
	if r.Status != messages.StatusFailed || r.Reason != messages.ReasonCostBudget ||
		r.Error != "stopped: the task cost $0.3000 without a final answer; its budget is $0.2500" {
		t.Fatalf("status: %+v", r)
	}
	if got := len(rec.take()); got != 3 {
		t.Errorf("%d model calls, want 3", got)
	}
	for _, body := range []string{`{"input":"x","max_cost_usd":-1}`, `{"input":"x","max_cost_usd":1000001}`, `{"input":"x","max_cost_usd":"lots"}`, `{"input":"x","max_cost_usd":1e400}`} {
		code, out := post(t, srv.URL+"/v1/tasks", body)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out), "max_cost_usd") {
			t.Errorf("POST %s: %d %v, want 400 naming max_cost_usd", body, code, out)
		}
	}
}

// A node whose gateway has no price table says so once, in its log, when a task
// sets a cost budget (its model calls cost nothing there), and when an agent has
// one, at start; the task still runs.
func TestCostBudgetWithoutPricesIsLogged(t *testing.T) {
	cfg, _ := stopsConfig(t)
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "capped", MaxCostUSD: 1})
	n := nodetest.Start(t, cfg)
	if !strings.Contains(logs.String(), `agent capped has a cost budget (max_cost_usd), but the gateway has no price table`) {
		t.Errorf("no warning at start for the agent's budget: %s", logs.String())
	}
	for i := range 3 {
		res, err := n.RunTask(context.Background(), node.Task{Input: "1+1?", SessionID: fmt.Sprint("free-", i), MaxCostUSD: 0.01})
		if err != nil || res.Status != messages.StatusFailed || res.Reason != messages.ReasonLoop {
			t.Fatalf("RunTask: %+v %v, want it run to its loop stop (no cost)", res, err)
		}
	}
	if c := strings.Count(logs.String(), "a task sets a cost budget (max_cost_usd), but this node's gateway has no price table"); c != 1 {
		t.Errorf("%d warnings for tasks with a cost budget, want 1: %s", c, logs.String())
	}
}

// A node whose price table lacks the price of a model that a cost budget's calls go
// to says so, naming the model, at start for an agent's budget and once for a
// task's: those calls cost 0, and the budget may never be reached (it said
// nothing: only a node without any price table warned).
func TestCostBudgetOfAnUnpricedModelIsLogged(t *testing.T) {
	cfg, _ := stopsConfig(t)
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	dear, err := llm.NewScripted(llm.Script{Name: "dear", Steps: []llm.ScriptStep{{Content: "ok"}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway.Prices = map[string]gateway.Price{"dear": {Prompt: 1, Completion: 1}}
	cfg.MaxCostUSD = 1
	cfg.Agents = append(cfg.Agents, node.NamedAgent{Name: "capped", MaxCostUSD: 1}, node.NamedAgent{Name: "paid", Model: dear, MaxCostUSD: 1})
	n := nodetest.Start(t, cfg)
	for _, who := range []string{"agent capped", "the default agent"} {
		if !regexp.MustCompile(who + ` has a cost budget \(max_cost_usd\), but the price table \S+ has no price for its model scripted:`).MatchString(logs.String()) {
			t.Errorf("no warning at start naming the unpriced model of %s's budget: %s", who, logs.String())
		}
	}
	if strings.Contains(logs.String(), "agent paid has a cost budget") {
		t.Errorf("a warning for an agent whose model has a price: %s", logs.String())
	}
	for i := range 2 {
		res, err := n.RunTask(context.Background(), node.Task{Input: "1+1?", SessionID: fmt.Sprint("unpriced-", i), MaxCostUSD: 0.01})
		if err != nil || res.Status != messages.StatusFailed {
			t.Fatalf("RunTask: %+v %v, want it run to a stop", res, err)
		}
	}
	if c := len(regexp.MustCompile(`a task sets a cost budget \(max_cost_usd\), but this node's price table \S+ has no price for its model scripted:`).FindAllString(logs.String(), -1)); c != 1 {
		t.Errorf("%d warnings for tasks with a cost budget, want 1: %s", c, logs.String())
	}
}

// A huge agent name is refused without being sent back whole: the error quotes
// its head and says how long it was.
func TestHugeAgentNameIsNotEchoed(t *testing.T) {
	cfg, _ := stopsConfig(t)
	n := nodetest.Start(t, cfg)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	for _, name := range []string{strings.Repeat("x", 100_000), strings.Repeat("é", 50_000) + " bad"} {
		code, out := post(t, srv.URL+"/v1/tasks", fmt.Sprintf(`{"input":"x","agent":%q}`, name))
		msg := fmt.Sprint(out)
		if code != http.StatusBadRequest || len(msg) > 1000 || !strings.Contains(msg, fmt.Sprintf("(%d bytes)", len(name))) {
			t.Errorf("a %d-byte agent name: %d, a %d-byte answer: %.300s", len(name), code, len(msg), msg)
		}
	}
}

// A node stopped while a task waits on its third model call, restarted with the
// agent's max_steps lowered to 2: the task goes on from its log (the call in flight
// is made, under its recorded key), then stops with max_steps, and its error counts
// the calls it made, saying that its limit was lowered, rather than claiming it
// stopped after 2 calls.
func TestMaxStepsLoweredAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	var steps []llm.ScriptStep
	for i := range 5 {
		steps = append(steps, llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: fmt.Sprint("c", i), Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d+1"}`, i)}}})
	}
	scripts := map[string][]llm.ScriptStep{"stepper": steps}
	config := func(model llm.Model, maxSteps int) node.Config {
		return node.Config{Model: model, DataDir: dir, Agents: []node.NamedAgent{{Name: "stepper", Tools: []string{"calculator"}, MaxSteps: maxSteps}}}
	}
	held := make(chan struct{})
	t.Cleanup(func() { close(held) })
	first := newByAgent(t, scripts)
	first.hold = func(_ string, step int) <-chan struct{} {
		if step == 3 {
			return held
		}
		return nil
	}
	cfg1 := config(first, 5)
	cfg1.HandoffGrace = heldCallGrace // the third model call never answers on the first node
	_, stop1 := startWithTask(t, cfg1, node.Task{Input: "count", SessionID: "s", Agent: "stepper"})
	waitFor(t, 10*time.Second, "the third model call", func() bool { return first.callsOf("stepper") >= 3 })
	stop1()

	n2 := nodetest.Start(t, config(newByAgent(t, scripts), 2))
	var events []messages.Envelope
	waitFor(t, 10*time.Second, "the task to end", func() bool {
		events = readAll(t, n2.Log(), "s")
		last := events[len(events)-1].Type
		return last == messages.TypeTaskCompleted || last == messages.TypeTaskFailed
	})
	failed := payloads[*messages.TaskFailed](t, events)
	if len(failed) != 1 || failed[0].Reason != messages.ReasonMaxSteps {
		t.Fatalf("the task's end: %+v; want it failed with max_steps", events[len(events)-1])
	}
	want := fmt.Sprintf("stopped after %d model calls", failed[0].Steps)
	if failed[0].Steps <= 2 || !strings.Contains(failed[0].Error, want) || !strings.Contains(failed[0].Error, "max steps are 2") {
		t.Errorf("error %q after %d steps; want %q and its lowered limit", failed[0].Error, failed[0].Steps, want)
	}
}
