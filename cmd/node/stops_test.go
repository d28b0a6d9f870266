package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/llm"
	"github.com/troupe-run/troupe/messages"
)

const stopAgents = `agents:
  wary:
    loop_repeats: 2
  oneshot:
    paradigm: simple
    system_prompt: Answer at once.
`

// node run ends a stopped task with exit 1 and a line that gives the reason and the
// numbers; a bad --max-tokens exits 2 before anything runs.
func TestRunStopConditions(t *testing.T) {
	agents := writeAgents(t, stopAgents)
	step := llm.ScriptStep{ToolCalls: []messages.ToolCall{{ID: "c", Name: "calculator", Arguments: `{"expression":"1+1"}`}},
		Content: "I will compute.", Usage: messages.Usage{PromptTokens: 90, CompletionTokens: 10}}
	script := writeScript(t, step, step, step, step)
	for _, c := range []struct {
		name  string
		args  []string
		code  int
		want  string
		calls int
	}{
		{"token budget", []string{"--max-tokens", "150"}, 1,
			"failed (token_budget): stopped: the task used 200 tokens (180 prompt + 20 completion) without a final answer; its budget is 150", 2},
		{"loop", []string{"--agent", "wary"}, 1, `failed (loop_detected): stopped: the same call calculator({"expression":"1+1"}) was requested 2 times`, 2},
		{"simple", []string{"--agent", "oneshot"}, 0, "answer: I will compute.", 1},
		{"negative budget", []string{"--max-tokens", "-1"}, 2, "max_tokens must be between 0 and 100000000", 0},
		{"budget too large", []string{"--max-tokens", "100000001"}, 2, "max_tokens must be between 0 and 100000000", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &requestLog{}
			var out, errb bytes.Buffer
			args := append([]string{"run", "--data", t.TempDir(), "--agents", agents, "--model", "scripted:" + script}, c.args...)
			code := run(context.Background(), append(args, "what is 1+1?"), &out, &errb, options{wrapModel: func(m llm.Model) llm.Model { rec.Model = m; return rec }})
			if code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
				t.Fatalf("exit %d, want %d and %q:\n%s\n%s", code, c.code, c.want, out.String(), errb.String())
			}
			if len(rec.reqs) != c.calls {
				t.Errorf("%d model calls, want %d", len(rec.reqs), c.calls)
			}
			if c.name == "simple" && len(rec.reqs[0].Tools) != 0 {
				t.Errorf("the simple agent was offered %d tools", len(rec.reqs[0].Tools))
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--data", t.TempDir(), "--max-tokens", "5"}, &out, &errb, options{}); code != 2 || !strings.Contains(errb.String(), "--max-tokens is node run's") {
		t.Errorf("serve --max-tokens: exit %d, %q", code, errb.String())
	}
}

// node agents list shows a simple agent, without tools, and its stop settings in JSON.
func TestAgentsListShowsSimpleAndStops(t *testing.T) {
	code, out, errOut := runAgents(t, "list", "--agents", writeAgents(t, stopAgents))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "oneshot") || !strings.Contains(lines[1], "simple") || !strings.Contains(lines[1], "(none)") {
		t.Errorf("list =\n%s", out)
	}
	code, out, errOut = runAgents(t, "list", "--json", "--agents", writeAgents(t, stopAgents))
	if code != 0 || !strings.Contains(out, `"loop_repeats": 2`) || !strings.Contains(out, `"paradigm": "simple"`) {
		t.Errorf("list --json: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runAgents(t, "list", "--agents", writeAgents(t, "agents:\n  a:\n    paradigm: simple\n    tools: [calculator]\n"))
	if code != 2 || !strings.Contains(errOut, `line 4: agent "a": paradigm "simple" offers no tools`) {
		t.Errorf("a simple agent with tools: exit %d, %q", code, errOut)
	}
}
