package actors_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
	"github.com/troupe-run/troupe/tools"
)

// recorded runs a real session through the actors and returns its events and agent.
func recorded(t *testing.T) ([]messages.Envelope, actors.Agent) {
	t.Helper()
	events, agent, _ := recordedIn(t)
	return events, agent
}

// recordedIn is recorded that also returns the configurations the session's
// tasks name, as the log holds them.
func recordedIn(t *testing.T) ([]messages.Envelope, actors.Agent, map[string]*messages.AgentConfig) {
	t.Helper()
	add := funcTool{"add", func(_ context.Context, c tools.Call) (string, error) { return "3", nil }}
	mul := funcTool{"mul", func(_ context.Context, c tools.Call) (string, error) { return "6", nil }}
	h := newHarness(t, harnessOpts{tools: []tools.Tool{add, mul}, model: script(t,
		calls(messages.ToolCall{ID: "1", Name: "add", Arguments: `{"a":1,"b":2}`}, messages.ToolCall{ID: "2", Name: "mul", Arguments: `{"a":2,"b":3}`}),
		calls(messages.ToolCall{ID: "3", Name: "nope", Arguments: `{}`}),
		llm.ScriptStep{Content: "3 and 6"})})
	h.submit("v", "task-v", "compute")
	events := h.wait("v")
	agent := actors.Agent{Model: "scripted", SystemPrompt: "test", Tools: []messages.ToolSpec{add.Spec(), mul.Spec()}}
	configs, err := actors.LoadConfigs(context.Background(), h.log, actors.NamedConfigs(events))
	if err != nil {
		t.Fatal(err)
	}
	return events, agent, configs
}

func TestVerifyARecordedSessionIsDeterministic(t *testing.T) {
	events, agent := recorded(t)
	div, err := actors.Verify(agent, events)
	if err != nil || div != nil {
		t.Fatalf("verify: %v %v", div, err)
	}
}

// A session recorded under decision rules 6 diverges at its first model request
// when its agent's system prompt changed since: its task did not record the
// configuration it ran under, and is re-decided under today's.
func TestVerifyReportsAChangedPromptAtItsStep(t *testing.T) {
	events, agent := recorded(t)
	events = asRecordedUnder(t, events, 6)
	agent.SystemPrompt = "You are terse."
	div, err := actors.Verify(agent, events)
	if err != nil || div == nil {
		t.Fatalf("a changed prompt must diverge: %v %v", div, err)
	}
	if div.Seq != 2 || !strings.Contains(div.Expected, "model.requested") || !strings.Contains(div.Actual, "prompt_hash") {
		t.Fatalf("divergence: %s", div)
	}
}

// A session recorded under decision rules 7 verifies with its agent configured
// otherwise since (another system prompt, its skills' section among it, another
// model, other approvals): its task is re-decided under the configuration it
// recorded.
// The configuration is in the log's stream of its digest, not with the task; a
// log that lost it verifies as rules 6 did, under the configuration now. A task as
// the first builds of rules 7 recorded it, its configuration with it, is
// re-decided under that one.
func TestVerifyDecidesUnderTheRecordedConfiguration(t *testing.T) {
	events, agent, configs := recordedIn(t)
	task := decode[*messages.TaskSubmitted](t, events[0])
	c := configs[task.ConfigDigest]
	if task.Rules != actors.ContextRules || task.Config != nil || c == nil || c.SystemPrompt != "test" || c.Model != "scripted" {
		t.Fatalf("the task recorded rules %d, digest %s, configuration %+v; the log holds %+v", task.Rules, task.ConfigDigest, task.Config, configs)
	}
	agent.SystemPrompt = "You are terse.\n\n<skills>\n- pdf: reads PDFs\n</skills>"
	agent.Model = "other"
	agent.Approvals = map[string]bool{"add": true}
	as := actors.Agents{Default: agent}
	if div, err := actors.VerifyRecorded(as, events, 1, configs); err != nil || div != nil {
		t.Fatalf("verify under another configuration: %v %v", div, err)
	}
	if div, err := actors.VerifyRecorded(as, events, 1, nil); err != nil || div == nil || div.Seq != 2 {
		t.Fatalf("verify without the configuration's content: %v %v; want a divergence at seq 2", div, err)
	}
	embedded := slices.Clone(events)
	task.Config = c
	enc, err := messages.NewEnvelope(task)
	if err != nil {
		t.Fatal(err)
	}
	embedded[0].Payload = enc.Payload
	if div, err := actors.VerifyRecorded(as, embedded, 1, nil); err != nil || div != nil {
		t.Fatalf("verify of the task with its configuration embedded: %v %v", div, err)
	}
}

// asRecordedUnder returns events with their tasks as a build of decision rules v
// recorded them: with that version, and with no configuration when v is older
// than 7.
func asRecordedUnder(t *testing.T, events []messages.Envelope, v int) []messages.Envelope {
	t.Helper()
	out := slices.Clone(events)
	for i, e := range out {
		if e.Type != messages.TypeTaskSubmitted {
			continue
		}
		task := decode[*messages.TaskSubmitted](t, e)
		task.Rules = v
		if v < 7 {
			task.ConfigDigest, task.Config = "", nil
		}
		enc, err := messages.NewEnvelope(task)
		if err != nil {
			t.Fatal(err)
		}
		out[i].Payload = enc.Payload
	}
	return out
}

func TestVerifyReportsAChangedToolOrder(t *testing.T) {
	events, agent := recorded(t)
	agent.Tools[0], agent.Tools[1] = agent.Tools[1], agent.Tools[0]
	div, err := actors.Verify(agent, events)
	if err != nil || div == nil || div.Seq != 2 {
		t.Fatalf("divergence: %v %v", div, err)
	}
}

func TestVerifyReportsALaterDivergenceAtItsStep(t *testing.T) {
	// With a lower step limit the first two steps agree; the third model request is
	// where the new code parts from the recording.
	events, agent := recorded(t)
	agent.MaxSteps = 2
	div, err := actors.Verify(agent, events)
	if err != nil || div == nil || div.Step != 2 || !strings.Contains(div.Expected, "model.requested") || !strings.Contains(div.Actual, "task.failed") {
		t.Fatalf("max steps divergence: %v %v", div, err)
	}
}

func TestVerifyRejectsACorruptLog(t *testing.T) {
	events, agent := recorded(t)
	events[3].Payload = []byte(`{"key":`)
	if _, err := actors.Verify(agent, events); err == nil || !strings.Contains(err.Error(), "seq 4") {
		t.Fatalf("corrupt event: %v", err)
	}
}

// Clip keeps a long text's head and the bytes around an offset, cutting between
// characters, and leaves a short one whole.
func TestClipKeepsTheHeadAndTheDifference(t *testing.T) {
	if s := "short"; actors.Clip(s, 2) != s {
		t.Errorf("Clip of a short text: %q", actors.Clip(s, 2))
	}
	long := strings.Repeat("é", 5000) + "DIFF" + strings.Repeat("ü", 5000)
	at := strings.Index(long, "DIFF")
	got := actors.Clip(long, at)
	if !utf8.ValidString(got) || len(got) > 700 || !strings.Contains(got, "DIFF") || !strings.HasPrefix(got, "éé") ||
		!strings.Contains(got, "bytes …]") || !strings.HasSuffix(got, "more bytes]") {
		t.Errorf("Clip: %d bytes: %q", len(got), got)
	}
	for _, at := range []int{-1, 0, 1, len(long) - 1, len(long), len(long) + 5} {
		if got := actors.Clip(long, at); !utf8.ValidString(got) || len(got) > 700 {
			t.Errorf("Clip at %d: %d bytes, valid %v", at, len(got), utf8.ValidString(got))
		}
	}
}
