package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/node"
	"github.com/troupe-run/troupe/node/nodetest"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/notes"
)

// chainRun is what a session's events say of its chains: each step's request
// ("step=tool args") and, by call ID, the answer the model read.
type chainRun struct {
	steps   []string
	answers map[string]messages.ToolCallCompleted
}

func chainRunOf(t *testing.T, events []messages.Envelope) chainRun {
	t.Helper()
	r := chainRun{answers: map[string]messages.ToolCallCompleted{}}
	for _, e := range events {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *messages.ToolCallRequested:
			if p.Chain != "" {
				r.steps = append(r.steps, p.ChainStep+"="+p.Tool+" "+p.Arguments)
			}
		case *messages.ToolCallCompleted:
			if e.Actor == "session" { // the chain's answer, not a step's
				r.answers[p.CallID] = *p
			}
		}
	}
	return r
}

// rememberChain adds a note, then searches the notes for it.
var rememberChain = tools.Chain{
	Name: "remember", Description: "Notes a fact and shows what the notes hold on it.",
	InputSchema: []byte(`{"type":"object","properties":{"fact":{"type":"string"},"about":{"type":"string"}},"required":["fact","about"]}`),
	Steps: []tools.ChainStep{
		{Name: "add", Tool: "notes", Args: `{"op":"add","args":{"type":"fact","body":{{json .args.fact}}}}`},
		{Name: "find", Tool: "notes", Args: `{"op":"search","args":{"query":{{json .args.about}}}}`},
	},
	Output: `noted {{.steps.add.json.id}}; {{.steps.find.json.matched}} note(s) on {{.args.about}}`,
}

// A chain's steps can call the notes tool: the node builds its chains once the notes
// joined the agent's tools. Each step is recorded, and the note is in the notes
// stream.
func TestChainStepCallsTheNotes(t *testing.T) {
	cfg := node.Config{DataDir: t.TempDir(), Notes: &notes.Config{}, Chains: []tools.Chain{rememberChain},
		Model: scripted(t, messages.ToolCall{ID: "c1", Name: "remember", Arguments: `{"fact":"Alice likes aisle seats","about":"aisle"}`})}
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "s-1", "remember that Alice likes aisle seats")
	run := chainRunOf(t, events)
	if len(run.steps) != 2 || !strings.HasPrefix(run.steps[0], "add=notes ") || !strings.HasPrefix(run.steps[1], `find=notes {"op":"search","args":{"query":"aisle"}}`) {
		t.Fatalf("steps: %q", run.steps)
	}
	if a := run.answers["c1"]; a.Error != "" || a.Result != "noted n1; 1 note(s) on aisle" {
		t.Fatalf("the chain answered %+v", a)
	}
	notesEvents, err := n.Log().Read(context.Background(), notes.Stream("default"), 1)
	if err != nil || len(notesEvents) != 1 || notesEvents[0].Type != messages.TypeNoteAdded {
		t.Fatalf("the notes stream: %+v, %v", notesEvents, err)
	}
	// The agent replay verification builds from the same configuration runs the
	// chain as the node did.
	agent, err := cfg.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if agent.Chains["remember"] == nil {
		t.Fatalf("the agent's chains: %v", agent.Chains)
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
	// A caller that built the notes tool on its log (replay verify) keeps its own.
	own, err := notes.New(notes.Config{Log: n.Log()})
	if err != nil {
		t.Fatal(err)
	}
	ownTools, err := own.Tools()
	if err != nil {
		t.Fatal(err)
	}
	withOwn := cfg
	withOwn.Tools = append([]tools.Tool{tools.Calculator{}, tools.NewClock(nil)}, ownTools...)
	if agent, err := withOwn.Agent(); err != nil {
		t.Fatal(err)
	} else if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify with the caller's notes tool: %v %v", div, err)
	}
	// Without the notes, the same chain is refused before the node starts.
	cfg.Notes = nil
	err = cfg.Validate()
	if !errors.Is(err, tools.ErrBadChain) || !strings.Contains(err.Error(), `step "add" calls the tool "notes", which the agent does not have`) {
		t.Fatalf("Validate without notes: %v", err)
	}
	if _, err := node.New(context.Background(), cfg); !errors.Is(err, tools.ErrBadChain) {
		t.Fatalf("New without notes: %v", err)
	}
}

// A chain's step can call an MCP server's tool by its catalog name: the name is
// checked against the configured servers when the chain is built, and the tool is
// looked up when the step runs; a tool the server does not offer then ends the
// chain with an error naming the step.
func TestChainStepCallsAnMCPServersTool(t *testing.T) {
	client := connect(t, "wx", weatherServer())
	forecast := tools.Chain{Name: "forecast_then_alerts", Description: "Forecast, then alerts, of a city.",
		Steps: []tools.ChainStep{
			{Name: "forecast", Tool: "wx__forecast", Args: `{"city":{{json .args.city}}}`},
			{Name: "alerts", Tool: "wx__alerts", Args: `{"city":{{json .args.city}}}`},
			{Name: "sum", Tool: "calculator", Args: `{"expression":"1+1"}`},
		},
		Output: `{{.steps.forecast.output}}; {{.steps.alerts.output}}`}
	radar := tools.Chain{Name: "radar", Description: "The radar of a city.",
		Steps: []tools.ChainStep{
			{Name: "first", Tool: "calculator", Args: `{"expression":"2*2"}`},
			{Name: "image", Tool: "wx__radar", Args: `{"city":"Oslo"}`},
		}}
	cfg := node.Config{DataDir: t.TempDir(), Tools: []tools.Tool{tools.Calculator{}}, ToolCatalog: client, Chains: []tools.Chain{forecast, radar},
		Model: (&requestLog{}).model(t,
			call("c1", "forecast_then_alerts", `{"city":"Paris"}`),
			call("c2", "radar", `{}`),
			llm.ScriptStep{Content: "done"})}
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "s-1", "weather in Paris?")
	run := chainRunOf(t, events)
	want := []string{`forecast=wx__forecast {"city":"Paris"}`, `alerts=wx__alerts {"city":"Paris"}`, `sum=calculator {"expression":"1+1"}`, `first=calculator {"expression":"2*2"}`}
	if strings.Join(run.steps, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant\n%s", strings.Join(run.steps, "\n"), strings.Join(want, "\n"))
	}
	if a := run.answers["c1"]; a.Error != "" || a.Result != "sunny in Paris; no alerts" {
		t.Errorf("the chain of the server's tools answered %+v", a)
	}
	if a := run.answers["c2"]; !strings.Contains(a.Error, `chain radar stopped at step 2 of 2, "image" (wx__radar)`) || !strings.Contains(a.Error, "wx__radar") {
		t.Errorf("the chain of a tool the server does not offer answered %+v", a)
	}
	// Run as one call (node tools call, an MCP client of the node), the step's tool
	// is looked up in the catalog too.
	out, err := n.CallTool(context.Background(), "", "forecast_then_alerts", `{"city":"Rome"}`)
	if err != nil || out != "sunny in Rome; no alerts" {
		t.Errorf("CallTool = %q, %v", out, err)
	}
	if _, err := n.CallTool(context.Background(), "", "radar", `{}`); err == nil || !strings.Contains(err.Error(), `"image" (wx__radar)`) || !errors.Is(err, node.ErrToolFailed) {
		t.Errorf("CallTool of the chain whose tool is missing: %v", err)
	}
	agent, err := cfg.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
	// A step naming a server the configuration does not have is refused.
	cfg.Chains = []tools.Chain{{Name: "c", Description: "d", Steps: []tools.ChainStep{{Name: "s", Tool: "sky__forecast"}}}}
	if err := cfg.Validate(); !errors.Is(err, tools.ErrBadChain) || !strings.Contains(err.Error(), `step "s" calls the tool "sky__forecast"`) {
		t.Errorf("Validate of a step on an unknown server: %v", err)
	}
}

// Under search disclosure, a chain the model calls through call_tool runs step by
// step as a direct call does, and verifies against the configuration's agent.
func TestChainThroughCallToolUnderSearch(t *testing.T) {
	twice := tools.Chain{Name: "twice", Description: "Doubles a number twice.",
		Steps: []tools.ChainStep{
			{Name: "a", Tool: "calculator", Args: `{"expression": "{{.args.x}} * 2"}`},
			{Name: "b", Tool: "calculator", Args: `{"expression": "{{.steps.a.output}} * 2"}`},
		}}
	cfg := node.Config{DataDir: t.TempDir(), Tools: []tools.Tool{tools.Calculator{}}, Chains: []tools.Chain{twice}, Disclosure: "search",
		Model: (&requestLog{}).model(t, call("c1", "call_tool", `{"name":"twice","arguments":{"x":5}}`), llm.ScriptStep{Content: "20"})}
	n := nodetest.Start(t, cfg)
	events := nodetest.Run(t, n, "s-1", "double 5 twice")
	run := chainRunOf(t, events)
	if strings.Join(run.steps, "; ") != `a=calculator {"expression":"5 * 2"}; b=calculator {"expression":"10 * 2"}` {
		t.Fatalf("steps: %q", run.steps)
	}
	if a := run.answers["c1"]; a.Tool != "call_tool" || a.Result != "20" || a.Error != "" {
		t.Fatalf("call_tool answered %+v", a)
	}
	agent, err := cfg.Agent()
	if err != nil {
		t.Fatal(err)
	}
	if div, err := actors.Verify(agent, events); err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}
